// The chat page: asks for the token, lists the conversations, opens one (its stored history, then its live
// events), sends messages, interrupts, and answers approval requests.

import { ApiError, EventStream, api, token, whenUnauthorized } from "./api.js";
import { Chat, el } from "./chat.js";
import { RunTree } from "./tree.js";

const $ = (id) => document.getElementById(id);
const CURRENT = "chat.session";  // the open conversation, so that a reload reopens it
const phone = window.matchMedia("(max-width: 900px)");

const chat = new Chat($("messages"));
const tree = new RunTree($("run-tree"));
const ui = {
  dialog: $("token-dialog"), tokenInput: $("token-input"), tokenError: $("token-error"),
  list: $("conversation-list"), listNote: $("list-note"), text: $("composer-text"), send: $("send"),
  interrupt: $("interrupt"), approvals: $("approvals"), status: $("stream-status"), newButton: $("new-conversation"),
};
const page = { sessionId: null, stream: null, opening: 0, listed: [], approvalsAsked: 0 };

/** `fn`, called once for a burst of calls (a replayed stream repeats the events that ask for it). */
function coalesced(fn, wait = 60) {
  let timer = null;
  return () => {
    clearTimeout(timer);
    timer = setTimeout(fn, wait);
  };
}

function path(sessionId, rest = "") {
  return `/sessions/${encodeURIComponent(sessionId)}${rest}`;
}

// -- the token -----------------------------------------------------------------------------------------------

function askToken(problem) {
  ui.tokenError.hidden = !problem;
  ui.tokenError.textContent = problem || "";
  if (!ui.dialog.open) {
    ui.tokenInput.value = "";
    ui.dialog.showModal();
  }
  ui.tokenInput.focus();
}

ui.dialog.addEventListener("cancel", (event) => {
  if (!token.get()) event.preventDefault();  // nothing works without one
});

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = ui.tokenInput.value.trim();
  if (!value) return;
  token.set(value);
  ui.dialog.close();
  start();
});

$("change-token").addEventListener("click", () => {
  token.clear();
  askToken("");
});

whenUnauthorized((message, refused) => {
  token.clear();
  stopStream();
  setStatus("idle", "");
  askToken(refused ? `The server refused this token (401: ${message}). Enter the right one.` : "");
});

function reported(error) {
  // A 401 already asked for the token again.
  if (!(error instanceof ApiError && error.status === 401)) chat.note("failure", error.message, "error");
}

// -- the conversation list -----------------------------------------------------------------------------------

function ago(seconds) {
  const passed = Math.max(0, Date.now() / 1000 - seconds);
  if (passed < 60) return "just now";
  if (passed < 3600) return `${Math.floor(passed / 60)} min ago`;
  if (passed < 86400) return `${Math.floor(passed / 3600)} h ago`;
  return new Date(seconds * 1000).toLocaleDateString();
}

async function loadList() {
  try {
    const answer = await api("GET", "/sessions?limit=50");
    page.listed = answer.sessions;
    ui.listNote.hidden = true;
  } catch (error) {
    if (error.status === 401) return false;
    page.listed = [];
    ui.listNote.hidden = false;
    ui.listNote.textContent = error.status === 501
      ? "This server cannot list its conversations; new ones still work, and this tab reopens the last one."
      : `The conversations could not be listed: ${error.message}`;
  }
  renderList();
  return true;
}

const refreshList = coalesced(loadList, 300);

function renderList() {
  const items = [...page.listed];
  if (page.sessionId && !items.some((s) => s.id === page.sessionId)) {
    items.unshift({ id: page.sessionId, title: "", turns: 0, updated: Date.now() / 1000 });
  }
  ui.list.replaceChildren(...items.map((session) => {
    const button = el("button", "", session.title || "New conversation");
    button.type = "button";
    button.dataset.testid = "conversation";
    button.dataset.sessionId = session.id;
    button.setAttribute("aria-current", String(session.id === page.sessionId));
    button.append(el("span", "when", `${session.turns} turns · ${ago(session.updated)}`));
    button.addEventListener("click", () => open(session.id));
    const item = el("li");
    item.append(button);
    return item;
  }));
}

ui.newButton.addEventListener("click", async () => {
  try {
    const created = await api("POST", "/sessions", {});
    await open(created.id);
  } catch (error) {
    reported(error);
  }
});

// -- one conversation ----------------------------------------------------------------------------------------

function stopStream() {
  if (page.stream) page.stream.stop();
  page.stream = null;
}

function setStatus(state, detail) {
  ui.status.dataset.state = state;
  const words = { idle: "not connected", live: "live", reconnecting: "reconnecting…" }[state] || state;
  ui.status.textContent = detail ? `${words} (${detail})` : words;
  if (page.stream) ui.status.dataset.reconnects = String(page.stream.reconnects);
}

function setRunning(running) {
  document.body.dataset.running = String(running);
}

async function open(sessionId) {
  stopStream();
  const opening = ++page.opening;
  page.sessionId = sessionId;
  sessionStorage.setItem(CURRENT, sessionId);
  chat.clear();
  tree.clear();
  ui.approvals.replaceChildren();
  renderList();
  if (phone.matches) $("conversations-panel").open = false;
  try {
    let after = null;
    let index = 0;
    do {
      const answer = await api("GET", path(sessionId, after === null ? "/turns" : `/turns?after=${after}`));
      if (opening !== page.opening) return;
      for (const turn of answer.turns) chat.put(index++, turn);
      after = answer.next;
    } while (after !== null);
  } catch (error) {
    if (opening !== page.opening) return;
    if (error.status === 404) {
      sessionStorage.removeItem(CURRENT);
      page.sessionId = null;
      renderList();
      chat.note("info", "That conversation no longer exists; start a new one.", "gone");
      return;
    }
    return reported(error);
  }
  ui.text.disabled = false;
  ui.send.disabled = false;
  ui.interrupt.disabled = false;
  ui.text.focus();
  refreshApprovals();
  page.stream = new EventStream(sessionId, {
    event: (type, data) => onEvent(type, data),
    status: setStatus,
    fatal: (error) => {
      setStatus("idle", "");
      reported(error);
    },
  });
  page.stream.start();
}

function onEvent(type, data) {
  const branch = data.main === false;
  tree.event(type, data, branch);
  if (branch) {
    // A branch's text belongs in the tree, never in the answer. Calls of one turn run side by side, as
    // branches of the main line: their timings go on the cards the stored turn shows.
    if (type === "tool_started" && chat.cards.has(data.call.id)) chat.toolStarted(data.call);
    if (type === "tool_finished" && chat.cards.has(data.call.id)) chat.toolFinished(data.call, data.result, data.seconds);
    return;
  }
  switch (type) {
    case "message_started":
      setRunning(true);
      break;
    case "turn_started":
      chat.turnStarted(data.index);
      break;
    case "text_delta":
      chat.delta(data.text);
      break;
    case "turn_stored":
      if (chat.put(data.index, data.turn) === "gap") open(page.sessionId);
      break;
    case "turn_updated":
      chat.update(data.index, data.turn);
      break;
    case "tool_started":
      chat.toolStarted(data.call);
      break;
    case "tool_finished":
      chat.toolFinished(data.call, data.result, data.seconds);
      break;
    case "message_finished":
      setRunning(false);
      if (!data.ok) {
        const kind = data.status === "pending" ? "info" : "warning";
        const what = data.status === "pending" ? "The answer waits for approval" : `The answer is ${data.status}`;
        chat.note(kind, data.reason ? `${what}: ${data.reason}` : `${what}.`, "message-outcome");
      }
      refreshList();
      break;
    case "message_failed":
      setRunning(false);
      chat.failed(data.error, data.guardrail);
      break;
    case "interrupted":
      setRunning(false);
      chat.interrupted(data.dropped);
      break;
    case "approval_requested":
    case "approval_answered":
      approvalsChanged();
      break;
    case "events_lost":
      open(page.sessionId);  // some events are gone: start again from the stored conversation
      break;
    case "store_paused":
      chat.note("warning", `Saving the conversation failed; trying again in ${data.retry_in} s (${data.error}).`);
      break;
    default:
      break;
  }
}

// -- sending, interrupting -----------------------------------------------------------------------------------

async function send() {
  const text = ui.text.value;
  if (!text.trim() || !page.sessionId) return;
  ui.text.value = "";
  chat.sending(text);
  try {
    await api("POST", path(page.sessionId, "/messages"), { text });
  } catch (error) {
    if (chat.pendingUser) chat.pendingUser.remove();
    chat.pendingUser = null;
    ui.text.value = text;
    reported(error);
  }
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});

ui.text.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});

ui.interrupt.addEventListener("click", async () => {
  if (!page.sessionId) return;
  try {
    await api("POST", path(page.sessionId, "/interrupt"), {});
  } catch (error) {
    reported(error);
  }
});

// -- approvals -----------------------------------------------------------------------------------------------

async function refreshApprovals() {
  const sessionId = page.sessionId;
  const asked = ++page.approvalsAsked;
  let answer;
  try {
    answer = await api("GET", path(sessionId, "/approvals"));
  } catch (error) {
    return reported(error);
  }
  if (asked !== page.approvalsAsked || sessionId !== page.sessionId) return;  // a newer answer is coming
  ui.approvals.replaceChildren(...answer.approvals.map((request) => approvalCard(sessionId, request)));
}

const approvalsChanged = coalesced(refreshApprovals);

function approvalCard(sessionId, request) {
  const card = el("div", "approval");
  card.dataset.testid = "approval";
  const together = !request.live && request.calls.length > 1;
  card.append(el("strong", "", together ? "The agent asks to run these tools (decide each):" : "The agent asks to run:"));
  const decided = new Map();
  for (const call of request.calls) {
    const row = el("div", "approval-call");
    row.dataset.callId = call.id;
    const name = row.appendChild(el("span", "tool-name", call.name));
    name.dataset.testid = "approval-tool";
    let shown = call.arguments;
    try {
      shown = JSON.stringify(JSON.parse(call.arguments), null, 2);
    } catch (_) { /* shown as written */ }
    row.append(el("pre", "", shown));
    const buttons = row.appendChild(el("div", "buttons"));
    for (const [label, approved] of [["Approve", true], ["Deny", false]]) {
      const button = buttons.appendChild(el("button", approved ? "" : "danger", label));
      button.type = "button";
      button.dataset.testid = approved ? "approve" : "deny";
      button.addEventListener("click", async () => {
        decided.set(call.id, { call_id: call.id, approved, reason: approved ? "" : "denied on the chat page" });
        for (const b of buttons.querySelectorAll("button")) b.disabled = true;
        if (together && decided.size < request.calls.length) return;  // kept calls are answered together
        try {
          await api("POST", path(sessionId, "/approvals"), { decisions: [...decided.values()] });
        } catch (error) {
          reported(error);
        }
        refreshApprovals();
      });
    }
    card.append(row);
  }
  return card;
}

// -- start ---------------------------------------------------------------------------------------------------

async function start() {
  if (!(await loadList())) return;  // 401: the server wants a token (asked for), or another one
  const remembered = sessionStorage.getItem(CURRENT);
  if (remembered && (remembered !== page.sessionId || !page.stream)) await open(remembered);
  else if (!page.sessionId) chat.note("info", "Start a new conversation, or pick one from the list.", "hint");
}

if (phone.matches) $("tree-panel").open = false;
setRunning(false);
start();
