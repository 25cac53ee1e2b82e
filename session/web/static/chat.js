// The conversation as the page shows it: stored turns, the answer being streamed, tool cards, verification
// reports and outcomes. Everything a model or a tool wrote goes in as text (textContent), never as markup.

/** A new element with a class and, optionally, text. */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function pretty(argumentsText) {
  try {
    return JSON.stringify(JSON.parse(argumentsText), null, 2);
  } catch (_) {
    return String(argumentsText);  // not JSON (a model may write anything): shown as written
  }
}

function seconds(value) {
  return value < 1 ? `${Math.round(value * 1000)} ms` : `${value.toFixed(value < 10 ? 2 : 1)} s`;
}

export class Chat {
  constructor(container) {
    this.container = container;
    this.clear();
  }

  clear() {
    this.container.replaceChildren();
    this.count = 0;  // stored turns shown: the next stored turn's index
    this.cards = new Map();  // tool call id -> its card
    this.streaming = null;  // the bubble of the answer being written
    this.pendingUser = null;  // a message sent, not yet stored
    this.skipping = false;  // the events replayed are of a turn already shown
    this.bubbles = new Map();  // stored turn index -> its element
  }

  add(node) {
    const atEnd = this.container.scrollHeight - this.container.scrollTop - this.container.clientHeight < 80;
    this.container.append(node);
    if (atEnd) this.container.scrollTop = this.container.scrollHeight;
    return node;
  }

  note(kind, text, testid = "notice") {
    const node = el("div", `notice ${kind}`, text);
    node.dataset.testid = testid;
    return this.add(node);
  }

  /** Show the stored turn `index`; false when it is shown already, "gap" when turns before it are missing. */
  put(index, turn) {
    if (index < this.count) return false;
    if (index > this.count) return "gap";
    let node;
    if (turn.role === "user") {
      node = this.userBubble(turn);
      if (this.pendingUser) {
        this.pendingUser.replaceWith(node);
        this.pendingUser = null;
      } else {
        this.add(node);
      }
    } else if (turn.role === "assistant") {
      node = this.assistantBubble(turn);
      if (this.streaming) {
        this.streaming.replaceWith(node);
        this.streaming = null;
      } else {
        this.add(node);
      }
    } else if (turn.role === "tool") {
      node = this.toolResults(turn);
    } else {
      node = this.add(this.systemTurn(turn));
    }
    if (node) this.bubbles.set(index, node);
    this.count = index + 1;
    this.skipping = false;
    return true;
  }

  /** The stored turn `index` changed (its outcome was written): show the new outcome. */
  update(index, turn) {
    const node = this.bubbles.get(index);
    if (node && turn.role === "assistant") this.outcome(node, (turn.meta || {}).outcome);
  }

  userBubble(turn) {
    const node = el("div", "bubble user", turn.parts.filter((p) => p.type === "text").map((p) => p.text).join("\n"));
    node.dataset.testid = "user-message";
    return node;
  }

  sending(text) {
    const node = el("div", "bubble user pending", text);
    node.dataset.testid = "user-message";
    this.pendingUser = this.add(node);
  }

  assistantBubble(turn) {
    const node = el("div", "bubble assistant");
    node.dataset.testid = "assistant-message";
    for (const part of turn.parts) {
      if (part.type === "text" && part.text) {
        const text = node.appendChild(el("div", "text", part.text));
        text.dataset.testid = "answer-text";
      } else if (part.type === "reasoning" && part.text) {
        const details = node.appendChild(el("details", "reasoning"));
        details.append(el("summary", "", "Reasoning"), el("pre", "", part.text));
      } else if (part.type === "tool_call") {
        node.append(this.card(part));
      }
    }
    this.outcome(node, (turn.meta || {}).outcome);
    return node;
  }

  /** A degraded, failed or pending outcome, marked on the answer so that it never reads as a success. */
  outcome(node, outcome) {
    for (const old of node.querySelectorAll(":scope > .outcome")) old.remove();
    if (!outcome || !outcome.status) return;
    node.dataset.outcome = outcome.status;
    const box = el("div", "outcome");
    box.dataset.testid = "outcome";
    box.append(el("span", `badge ${outcome.status}`, outcome.status === "ok" ? "ok" : outcome.status));
    if (outcome.reason) box.append(el("div", "outcome-reason", outcome.reason));
    if (outcome.status === "ok" && !outcome.reason) box.hidden = true;  // success needs no mark
    node.append(box);
  }

  card(call) {
    let card = this.cards.get(call.id);
    if (card) return card;
    card = el("details", "tool-card");
    card.dataset.testid = "tool-card";
    card.dataset.callId = call.id;
    card.dataset.status = "called";
    const summary = card.appendChild(el("summary"));
    const name = summary.appendChild(el("span", "tool-name", call.name));
    name.dataset.testid = "tool-name";
    const status = summary.appendChild(el("span", "tool-status", "called"));
    status.dataset.testid = "tool-status";
    const duration = summary.appendChild(el("span", "tool-duration"));
    duration.dataset.testid = "tool-duration";
    card.append(el("div", "tool-label", "Arguments"));
    const args = card.appendChild(el("pre", "tool-args", pretty(call.arguments)));
    args.dataset.testid = "tool-args";
    card.append(el("div", "tool-label", "Result"));
    const result = card.appendChild(el("pre", "tool-result", "(no result yet)"));
    result.dataset.testid = "tool-result";
    this.cards.set(call.id, card);
    return card;
  }

  setCard(card, state, text) {
    card.dataset.status = state;
    card.querySelector(".tool-status").textContent = text;
  }

  /** Fill in a call's result; a call whose card is not shown (an older page of history) gets a card of its own. */
  result(part) {
    let card = this.cards.get(part.call_id);
    if (!card) {
      card = this.card({ id: part.call_id, name: part.name, arguments: "" });
      this.add(card);
    }
    card.querySelector(".tool-result").textContent = part.content;
    this.setCard(card, part.is_error ? "error" : "done", part.is_error ? "error" : "done");
    return card;
  }

  toolResults(turn) {
    let last = null;
    for (const part of turn.parts) if (part.type === "tool_result") last = this.result(part);
    return last;
  }

  toolStarted(call) {
    const card = this.cards.get(call.id) || this.add(this.card(call));
    if (card.dataset.status === "called") this.setCard(card, "running", "running…");
  }

  toolFinished(call, result, took) {
    const card = this.result(result);
    if (typeof took === "number") card.querySelector(".tool-duration").textContent = seconds(took);
  }

  systemTurn(turn) {
    const text = turn.parts.filter((p) => p.type === "text").map((p) => p.text).join("\n");
    const meta = turn.meta || {};
    if (meta.kind === "verification") {
      const node = el("details", "verification");
      node.open = true;
      node.dataset.testid = "verification";
      const attempt = meta.attempt ? ` (attempt ${meta.attempt})` : "";
      node.append(el("summary", "", `Verification report${attempt}: sent back to the model`), el("pre", "", text));
      return node;
    }
    const node = el("div", "system", text);
    node.dataset.testid = "system-message";
    return node;
  }

  /** A turn starts: one with an index already shown is a replay, whose streamed text is not shown again. */
  turnStarted(index) {
    this.skipping = typeof index === "number" && index < this.count;
  }

  /** A piece of the answer being streamed. */
  delta(text) {
    if (this.skipping || !text) return;
    if (!this.streaming) {
      this.streaming = this.add(el("div", "bubble assistant streaming"));
      this.streaming.dataset.testid = "streaming";
      this.streaming.append(el("div", "text"));
    }
    this.streaming.firstChild.append(text);  // a text node: never parsed as markup
    this.container.scrollTop = this.container.scrollHeight;
  }

  /** The message was interrupted: what was streamed of it stays, marked. */
  interrupted(dropped) {
    if (this.streaming) {
      this.streaming.classList.remove("streaming");
      this.streaming.classList.add("interrupted");
      this.streaming.dataset.testid = "interrupted-answer";
      this.streaming = null;
    }
    for (const card of this.cards.values()) {
      if (card.dataset.status === "running" || card.dataset.status === "called") this.setCard(card, "error", "cancelled");
    }
    const more = dropped ? ` (${dropped} queued message${dropped === 1 ? "" : "s"} dropped)` : "";
    this.note("warning", `Interrupted${more}.`, "interrupted");
  }

  failed(error, guardrail) {
    if (this.streaming) {
      this.streaming.classList.add("interrupted");
      this.streaming = null;
    }
    const why = guardrail ? ` (stopped by ${guardrail.name || "a guardrail"})` : "";
    this.note("failure", `The message failed${why}: ${error.type}: ${error.message}`, "failure");
  }
}
