// The run tree: one root per message, and below it a node per run path its events carried
// ("SelfConsistency/sample 3/ReAct", ".../tool:search#c2"): nested patterns, branches, samples and tool calls,
// each with its outcome or answer, its tokens and its time. Built live from the event stream.

import { el } from "./chat.js";

const BRANCH = /^.+ \d+$/;  // a fan-out's branch: "sample 3", "branch 2"
const TREE_EVENTS = new Set(["turn_started", "text_delta", "usage_delta", "turn_completed", "turn_failed",
  "tool_started", "tool_finished", "budget_report", "turn_stored", "turn_updated", "message_finished",
  "message_failed", "interrupted"]);

function short(text, most = 160) {
  const line = String(text).replace(/\s+/g, " ").trim();
  return line.length > most ? `${line.slice(0, most - 1)}…` : line;
}

class Node {
  constructor(name, path, parent) {
    this.name = name;
    this.path = path;
    this.parent = parent;
    this.children = new Map();
    this.status = "running";
    this.reason = "";
    this.answer = null;
    this.writing = "";
    this.input = 0;
    this.output = 0;
    this.spent = null;
    this.first = performance.now();
    this.last = this.first;
    this.seconds = null;
    this.branch = false;
    this.open = true;
    this.data = null;
  }

  touch() {
    const now = performance.now();
    for (let node = this; node; node = node.parent) node.last = now;
  }

  tokens() {
    let input = this.input;
    let output = this.output;
    for (const child of this.children.values()) {
      const [i, o] = child.tokens();
      input += i;
      output += o;
    }
    return [input, output];
  }
}

export class RunTree {
  constructor(container) {
    this.container = container;
    this.runs = [];
    this.current = null;
    this.scheduled = false;
  }

  clear() {
    this.runs = [];
    this.current = null;
    this.render();
  }

  start(messageId) {
    const root = new Node(`message ${this.runs.length + 1}`, "", null);
    root.messageId = messageId;
    for (const run of this.runs) run.open = false;
    this.runs.push(root);
    this.current = root;
    return root;
  }

  root() {
    return this.current || this.start(null);
  }

  node(path) {
    let node = this.root();
    if (!path) return node;
    let sofar = "";
    for (const name of path.split("/")) {
      sofar = sofar ? `${sofar}/${name}` : name;
      let child = node.children.get(name);
      if (!child) {
        child = new Node(name, sofar, node);
        child.branch = BRANCH.test(name) || name.startsWith("tool:");
        node.children.set(name, child);
      }
      node = child;
    }
    return node;
  }

  /** An answer written at `node`: its own, and its ancestors' up to the nearest branch (a sample's vote). */
  answered(node, text) {
    for (let at = node; at; at = at.parent) {
      at.answer = text;
      at.writing = "";
      if (at.status === "running" && at.parent) at.status = "done";
      if (at.branch) break;
    }
  }

  /** Take one event from the stream (main line or branch). */
  event(type, data, isBranch) {
    if (type === "message_started") {
      this.start(data.message_id);
      return this.schedule();
    }
    if (!TREE_EVENTS.has(type)) return;
    const path = data.path || "";
    const node = this.node(path);
    if (isBranch) node.branch = node.branch || BRANCH.test(node.name);
    node.touch();
    switch (type) {
      case "turn_started":
        node.writing = "";
        break;
      case "text_delta":
        node.writing += data.text || "";
        break;
      case "usage_delta":
        node.input += data.usage.input_tokens || 0;
        node.output += data.usage.output_tokens || 0;
        break;
      case "turn_completed": {
        const turn = data.turn;
        const text = turn.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
        if (turn.role === "assistant" && text) this.answered(node, text);
        if (turn.role === "system" && (turn.meta || {}).kind === "verification") {
          node.status = "retried";
          node.reason = `verification failed (attempt ${turn.meta.attempt || "?"})`;
        }
        break;
      }
      case "turn_failed":
        node.status = "failed";
        node.reason = `${data.error.type}: ${data.error.message}`;
        break;
      case "tool_started": {
        const tool = this.node(`${path ? `${path}/` : ""}tool:${data.call.name}#${data.call.id}`);
        tool.status = "running";
        break;
      }
      case "tool_finished": {
        const tool = this.node(`${path ? `${path}/` : ""}tool:${data.call.name}#${data.call.id}`);
        tool.status = data.result.is_error ? "error" : "done";
        tool.answer = data.result.content;
        tool.seconds = data.seconds;
        break;
      }
      case "budget_report":
        this.budget(data);
        break;
      case "turn_stored":
      case "turn_updated":
        this.outcome((data.turn.meta || {}).outcome);
        break;
      case "message_finished": {
        const root = this.root();
        root.status = data.ok ? "ok" : data.status;
        root.reason = data.reason || "";
        if (data.answer) root.answer = data.answer;
        root.seconds = (performance.now() - root.first) / 1000;
        break;
      }
      case "message_failed":
        this.root().status = "failed";
        this.root().reason = `${data.error.type}: ${data.error.message}`;
        break;
      case "interrupted":
        this.root().status = "interrupted";
        break;
      default:
        break;
    }
    this.schedule();
  }

  budget(data) {
    for (const [path, spent] of Object.entries(data.by_path || {})) this.node(path).spent = spent;
    const root = this.root();
    root.spent = data.spent;
    if (data.exhausted) {
      root.status = "degraded";
      root.reason = `budget ${data.budget} ran out`;
    }
  }

  /** The patterns' results on an answer's outcome, keyed by run path: a vote's tally on its node. */
  outcome(outcome) {
    if (!outcome) return;
    for (const [path, data] of Object.entries(outcome.data || {})) {
      const node = this.node(path);
      node.data = data;
      if (data && data.votes) {
        const tally = Object.entries(data.votes).map(([vote, count]) => `${short(vote, 60)} ×${count}`).join(", ");
        node.reason = `votes: ${tally}; kept sample ${data.sample}`;
        node.answer = (data.written || {})[data.answer] || data.answer;
        node.status = outcome.status === "ok" ? "done" : outcome.status;
      }
    }
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      this.render();
    });
  }

  render() {
    if (!this.runs.length) {
      this.container.replaceChildren(el("p", "note", "The runs of this page's messages appear here as they happen."));
      return;
    }
    const list = el("ul");
    list.setAttribute("role", "tree");
    for (const run of this.runs) list.append(this.item(run));
    this.container.replaceChildren(list);
  }

  item(node) {
    const li = el("li");
    li.setAttribute("role", "treeitem");
    li.dataset.testid = "tree-node";
    li.dataset.path = node.path;
    li.dataset.name = node.name;
    li.dataset.status = node.status;
    li.dataset.branch = String(node.branch);
    const head = el(node.children.size ? "summary" : "div", node.children.size ? "" : "leaf");
    const name = head.appendChild(el("span", "node-name", node.name.startsWith("tool:") ? node.name.split("#")[0] : node.name));
    name.dataset.testid = "node-name";
    if (node.branch && !node.name.startsWith("tool:")) head.append(el("span", "branch-mark", "branch"));
    const meta = [];
    if (node.status !== "running" && node.status !== "done") meta.push(node.status);
    const [input, output] = node.tokens();
    if (input || output) meta.push(`${input}→${output} tok`);
    if (node.spent && node.spent.turns) meta.push(`${node.spent.turns} turn${node.spent.turns === 1 ? "" : "s"}`);
    const took = node.seconds !== null ? node.seconds : (node.last - node.first) / 1000;
    if (took > 0) meta.push(took < 1 ? `${Math.round(took * 1000)} ms` : `${took.toFixed(1)} s`);
    const info = head.appendChild(el("span", "node-meta", meta.join(" · ")));
    info.dataset.testid = "node-meta";
    const lines = [];
    const shown = node.answer !== null ? node.answer : node.writing;
    if (shown) {
      const label = BRANCH.test(node.name) && node.name.startsWith("sample") ? "vote: " : node.answer === null ? "writing: " : "";
      const answer = el("span", "node-answer", label + short(shown));
      answer.dataset.testid = "node-answer";
      lines.push(answer);
    }
    if (node.reason) {
      const reason = el("span", "node-answer", node.reason);
      reason.dataset.testid = "node-reason";
      lines.push(reason);
    }
    if (!node.children.size) {
      head.append(...lines);
      li.append(head);
      return li;
    }
    const details = el("details");
    details.open = node.open;
    details.addEventListener("toggle", () => { node.open = details.open; });
    const children = el("ul");
    children.setAttribute("role", "group");
    for (const child of node.children.values()) children.append(this.item(child));
    details.append(head, ...lines, children);
    li.append(details);
    return li;
  }
}
