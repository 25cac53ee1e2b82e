// Drives an AG-UI server with the official client, @ag-ui/client's HttpAgent, and prints what its subscriber
// received, as one JSON object on stdout.
//
//   node client.cjs '{"url": "...", "token": "...", "threadId": "...", "runs": [{"text": "...", "tools": []}]}'
//
// Each run adds a user message with the run's text and runs the agent on the thread; the output lists, per run,
// the events the subscriber saw (type and the fields the tests read), how the run finished or failed, and the
// agent's messages after it.
const { HttpAgent } = require("@ag-ui/client");

async function main() {
  const spec = JSON.parse(process.argv[2]);
  const agent = new HttpAgent({
    url: spec.url,
    headers: { Authorization: `Bearer ${spec.token}` },
    threadId: spec.threadId,
  });
  const runs = [];
  for (const [index, step] of spec.runs.entries()) {
    const seen = { events: [], finished: null, error: null, failed: null };
    agent.addMessage({ id: `user-${index}`, role: "user", content: step.text });
    const subscriber = {
      onEvent: ({ event }) => {
        seen.events.push({
          type: event.type,
          messageId: event.messageId,
          toolCallId: event.toolCallId,
          toolCallName: event.toolCallName,
          delta: event.delta,
          content: event.content,
          stepName: event.stepName,
        });
      },
      onRunFinishedEvent: ({ outcome, result, pendingToolCallIds, interrupts }) => {
        seen.finished = { outcome, result, pendingToolCallIds, interrupts };
      },
      onRunErrorEvent: ({ event }) => {
        seen.error = { message: event.message, code: event.code };
      },
    };
    try {
      const { result, newMessages } = await agent.runAgent({ runId: `run-${index}`, tools: step.tools || [] },
                                                          subscriber);
      seen.result = result === undefined ? null : result;
      seen.newMessages = newMessages.map((m) => m.role);
    } catch (error) {
      seen.failed = String(error && error.message ? error.message : error);
    }
    seen.messages = agent.messages.map((m) => ({
      id: m.id,
      role: m.role,
      content: m.content === undefined ? null : m.content,
      toolCalls: (m.toolCalls || []).map((c) => c.function.name),
      toolCallId: m.toolCallId === undefined ? null : m.toolCallId,
    }));
    runs.push(seen);
  }
  process.stdout.write(JSON.stringify({ runs }) + "\n");
}

main().catch((error) => {
  process.stderr.write(String(error && error.stack ? error.stack : error) + "\n");
  process.exit(1);
});
