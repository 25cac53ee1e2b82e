"""Build the sandbox image locally, with no container registry: `python -m sandbox build-image`.

    python -m sandbox build-image                       # debootstrap + docker import; reused when present
    python -m sandbox build-image --force               # build again even if an image with the digest exists
    python -m sandbox build-image --suite bookworm --mirror http://deb.example/debian
    python -m sandbox build-image --image python:3.12-slim   # use a registry image instead (needs a registry)
"""

from __future__ import annotations

import argparse
import sys

import anyio

from loop import LoopError


def _print(line: str) -> None:
    print(line, flush=True)


async def _smoke_test(image: str) -> str:
    """Run one program in the new image with the sandbox's real settings; the Python version it reports."""
    from sandbox import DockerSandbox, SandboxConfig

    sandbox = DockerSandbox(SandboxConfig(image=image))
    result = await sandbox.exec(["python3", "-c", "import sys; print(sys.version.split()[0])"], timeout=60)
    if not result.ok:
        raise LoopError(f"the image does not run a program in the sandbox: {result.stderr.strip()}")
    return result.stdout.strip()


def build(args: argparse.Namespace) -> int:
    from sandbox._image import adopt_image, build_image, default_recipe

    if args.image:
        built = adopt_image(args.image, say=_print)
    else:
        recipe = default_recipe(suite=args.suite, mirror=args.mirror)
        built = build_image(recipe, force=args.force, say=_print)
    version = anyio.run(_smoke_test, built.tag)
    _print(f"ok: {built.tag} runs Python {version} in the sandbox "
           f"({'reused' if built.reused else 'ready'} in {built.seconds:.1f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    image = commands.add_parser("build-image", help="build the sandbox image (debootstrap + docker import)")
    image.add_argument("--suite", help="Debian release (default: this machine's, from its apt sources)")
    image.add_argument("--mirror", help="Debian mirror URL (default: this machine's, from its apt sources)")
    image.add_argument("--force", action="store_true", help="build even if an image with this recipe exists")
    image.add_argument("--image", help="use this Python image instead (pulled if missing: needs a registry)")
    args = parser.parse_args(argv)
    try:
        return build(args)
    except LoopError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
