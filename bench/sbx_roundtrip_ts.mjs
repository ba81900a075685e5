// bench/sbx_roundtrip.py's TypeScript SDK row: CALLS `sandbox.exec(["true"])`
// through sdk/typescript's build on one sandbox; prints the seconds of each
// as a JSON array. Usage: node sbx_roundtrip_ts.mjs SANDBOX_ID CALLS (SBX_HOST set)
import { Sandboxer } from '../sdk/typescript/dist/index.js';

const [id, calls] = process.argv.slice(2);
const client = new Sandboxer({ host: process.env.SBX_HOST });
const sandbox = await client.get(id);
const times = [];
for (let i = 0; i < Number(calls); i++) {
  const start = process.hrtime.bigint();
  const r = await sandbox.exec(['true']);
  if (r.exitCode !== 0) throw new Error(`exec exited ${r.exitCode}`);
  times.push(Number(process.hrtime.bigint() - start) / 1e9);
}
console.log(JSON.stringify(times));
