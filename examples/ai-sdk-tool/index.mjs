// A Vercel AI SDK tool that runs model-written code in a Sandboxer sandbox.
//
// Shows: a `runCode` tool (zod input schema) whose execute runs Python or
// bash through sandboxer-sdk and hands stdout/stderr/exitCode back to the
// model; `generateText` looping model -> tool -> model. The model here is
// the AI SDK's own MockLanguageModelV3 (from `ai/test`), scripted to call
// the tool first and then answer with its result, so this runs without an
// API key; swap in a real model (e.g. `openai('gpt-4o')`) and nothing else
// changes.
//
// Run: SBX_HOST=unix:/run/sandboxer/sbxd.sock node index.mjs
// With SANDBOXER_EXAMPLE_SANDBOX=<id> it uses that existing sandbox (and
// leaves it), with SANDBOXER_EXAMPLE_USER=<user> it runs the code as that user.
// Exits non-zero unless the tool's result is exactly right.
import { generateText, stepCountIs, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { Sandboxer } from 'sandboxer-sdk';
import { z } from 'zod';

const client = new Sandboxer(); // SBX_HOST and SBX_API_KEY, as the CLI takes them
const existing = process.env.SANDBOXER_EXAMPLE_SANDBOX;
const user = process.env.SANDBOXER_EXAMPLE_USER || undefined;

// The tool: what the model sees is the description and the input schema.
function runCodeTool(sandbox) {
  return tool({
    description: 'Run Python 3 (standard library only) or bash code in an isolated Linux sandbox; returns stdout, stderr and the exit code.',
    inputSchema: z.object({
      language: z.enum(['python', 'bash']),
      code: z.string().describe('The program; print the results you need to stdout.'),
    }),
    execute: async ({ language, code }, { abortSignal }) => {
      const argv = language === 'python' ? ['python3', '-c', code] : ['bash', '-c', code];
      const r = await sandbox.exec(argv, { timeoutMs: 60_000, user, signal: abortSignal });
      return {
        stdout: r.stdout.toString('utf8'),
        stderr: r.stderr.toString('utf8'),
        exitCode: r.exitCode, // null when killed by a signal (r.signal, r.timedOut)
      };
    },
  });
}

// A stand-in for a real model. Step 1: call runCode with some Python.
// Step 2: read the tool result from the prompt and answer with it.
const CODE = [
  'a, b = 0, 1',
  'for _ in range(20):',
  '    a, b = b, a + b',
  'print(a)',
].join('\n');

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 10, text: 10, reasoning: undefined },
};

const model = new MockLanguageModelV3({
  doGenerate: async ({ prompt }) => {
    const toolMessage = prompt.find((m) => m.role === 'tool');
    if (!toolMessage) {
      return {
        content: [{
          type: 'tool-call', toolCallId: 'call-1', toolName: 'runCode',
          input: JSON.stringify({ language: 'python', code: CODE }),
        }],
        finishReason: { unified: 'tool-calls', raw: undefined }, usage, warnings: [],
      };
    }
    const output = toolMessage.content.find((p) => p.type === 'tool-result').output; // {type: 'json', value}
    const text = output.type === 'json'
      ? `The 20th Fibonacci number is ${output.value.stdout.trim()}.`
      : `I could not run the code: ${JSON.stringify(output.value)}`;
    return {
      content: [{ type: 'text', text }],
      finishReason: { unified: 'stop', raw: undefined }, usage, warnings: [],
    };
  },
});

function fib(n) {
  let [a, b] = [0, 1];
  for (let i = 0; i < n; i++) [a, b] = [b, a + b];
  return a;
}

async function main() {
  const sandbox = existing
    ? await client.get(existing)
    : await client.create({ cpus: 1, memoryMib: 1024, labels: { example: 'ai-sdk-tool' }, ttl: '15m' });
  console.log(`sandbox ${sandbox.id} (${existing ? 'given' : 'created'})`);
  try {
    const result = await generateText({
      model,
      tools: { runCode: runCodeTool(sandbox) },
      stopWhen: stepCountIs(3), // model, tool, model
      prompt: 'What is the 20th Fibonacci number? Compute it, do not recall it.',
    });
    const toolResults = result.steps.flatMap((s) => s.toolResults);
    for (const tr of toolResults) console.log(`tool ${tr.toolName}(${tr.input.language}) ->`, JSON.stringify(tr.output));
    // A tool that throws is no result: the model gets the error text instead.
    const toolErrors = result.steps.flatMap((s) => s.content.filter((p) => p.type === 'tool-error'));
    for (const te of toolErrors) console.log(`tool ${te.toolName} failed: ${te.error}`);
    console.log(`final text: ${result.text}`);

    const want = { stdout: `${fib(20)}\n`, stderr: '', exitCode: 0 };
    const got = toolResults[0]?.output;
    if (toolResults.length !== 1 || JSON.stringify(got) !== JSON.stringify(want)) {
      throw new Error(`wrong tool result: want ${JSON.stringify(want)}, got ${JSON.stringify(toolResults.map((t) => t.output))}`);
    }
    if (!result.text.includes(String(fib(20)))) throw new Error(`final text lacks ${fib(20)}`);
    console.log('ok: the tool result is exactly right');
  } finally {
    if (!existing) {
      await sandbox.delete();
      console.log(`deleted ${sandbox.id}`);
    }
  }
}

main().catch((e) => {
  console.error(`FAIL: ${e?.stack ?? e}`);
  process.exitCode = 1;
});
