"""The sandbox image: recipe digests, reading the mirror from apt sources, and reusing an existing build."""

from pathlib import Path

import anyio
import pytest

from sandbox import ImageRecipe, SandboxConfig, SandboxError, build_image
from sandbox import __main__ as cli
from sandbox._engine import connect
from sandbox._image import IMAGE_NAME, adopt_image, apt_source, default_recipe


def test_the_digest_covers_every_part_of_the_recipe() -> None:
    base = ImageRecipe(suite="bookworm", mirror="http://mirror.test/debian")
    assert base.digest == ImageRecipe(suite="bookworm", mirror="http://mirror.test/debian").digest
    others = [ImageRecipe(suite="trixie", mirror=base.mirror), ImageRecipe(suite="bookworm", mirror="http://x/d"),
              ImageRecipe(suite="bookworm", mirror=base.mirror, packages=("python3", "git")),
              ImageRecipe(suite="bookworm", mirror=base.mirror, script_version=99)]
    assert len({base.digest, *(r.digest for r in others)}) == 5
    assert base.tag == f"cognitive-loop-sandbox:{base.digest}" and len(base.digest) == 16


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_mirror_and_suite_come_from_deb822_sources(tmp_path: Path) -> None:
    write(tmp_path, "etc/apt/sources.list.d/debian.sources",
          "Types: deb\n# a comment\nURIs: http://mirror.test/debian-security\nSuites: bookworm-security\n"
          "Components: main\n\nTypes: deb deb-src\nURIs: http://mirror.test/debian/\nSuites: bookworm "
          "bookworm-updates\nComponents: main\n")
    assert apt_source(str(tmp_path)) == ("http://mirror.test/debian", "bookworm")


def test_the_mirror_and_suite_come_from_one_line_sources(tmp_path: Path) -> None:
    write(tmp_path, "etc/apt/sources.list",
          "# deb http://old.test/debian buster main\ndeb-src http://src.test/debian trixie main\n"
          "deb [arch=amd64 signed-by=/k.gpg] https://mirror.test/debian trixie main contrib\n")
    assert apt_source(str(tmp_path)) == ("https://mirror.test/debian", "trixie")


def test_no_usable_source_says_what_to_pass(tmp_path: Path) -> None:
    write(tmp_path, "etc/apt/sources.list", "deb cdrom:[Debian]/ bookworm main\n")
    with pytest.raises(SandboxError, match="pass --mirror URL and --suite NAME"):
        apt_source(str(tmp_path))


def test_given_suite_and_mirror_are_used_as_they_are() -> None:
    recipe = default_recipe(suite="trixie", mirror="http://mirror.test/debian")
    assert (recipe.suite, recipe.mirror, recipe.packages, recipe.variant) == (
        "trixie", "http://mirror.test/debian", ("python3",), "minbase")


@pytest.fixture
def built_recipe(docker_config: SandboxConfig) -> ImageRecipe:
    """This machine's default recipe, whose image the session uses; a test never starts a build itself."""
    recipe = default_recipe()
    api = connect().api
    try:
        same = api.inspect_image(recipe.tag)["Id"] == api.inspect_image(docker_config.image)["Id"]
    except Exception:
        same = False
    if not same:  # these tests re-tag the image; they must not move a tag the user pointed elsewhere
        pytest.skip(f"{docker_config.image} is not {recipe.tag} (this machine's default recipe)")
    return recipe


@pytest.mark.docker
async def test_building_again_reuses_the_image_and_says_so(built_recipe: ImageRecipe) -> None:
    said: list[str] = []
    built = await anyio.to_thread.run_sync(lambda: build_image(say=said.append))
    recipe = built_recipe
    assert built.reused and built.tag == recipe.tag and said == [
        f"image {recipe.tag} is already built (recipe digest {recipe.digest}); reusing it"]
    client = connect()
    assert client.api.inspect_image(f"{IMAGE_NAME}:latest")["Id"] == client.api.inspect_image(recipe.tag)["Id"]
    labels = client.api.inspect_image(recipe.tag)["Config"]["Labels"]
    assert labels["org.cognitive-loop.sandbox.recipe"] == recipe.digest


@pytest.mark.docker
def test_the_command_line_reuses_the_image_and_smoke_tests_it(built_recipe: ImageRecipe,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["build-image"]) == 0
    out = capsys.readouterr().out
    assert "is already built" in out and "reusing it" in out
    assert "runs Python 3." in out and "in the sandbox (reused in" in out


@pytest.mark.docker
def test_an_existing_local_image_can_be_adopted_without_a_registry(built_recipe: ImageRecipe) -> None:
    recipe = built_recipe
    said: list[str] = []
    adopted = adopt_image(recipe.tag, say=said.append)  # present locally, so nothing is pulled
    assert adopted.tag == recipe.tag and said == [f"tagged {recipe.tag} as {IMAGE_NAME}:latest"]


@pytest.mark.docker
def test_a_missing_image_that_cannot_be_pulled_points_at_build_image(docker_config: SandboxConfig) -> None:
    # A name that exists nowhere and a registry host that cannot resolve: the pull fails on this machine.
    with pytest.raises(SandboxError, match="python -m sandbox build-image"):
        adopt_image("registry.invalid/nobody/none:0")
