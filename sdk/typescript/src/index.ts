// sandboxer-sdk: the TypeScript/JavaScript client of sbxd's REST API
// (docs/api.md). No runtime dependencies: node:http/node:https only.
export { Sandboxer, Snapshots, Keys } from './client.js';
export { Sandbox, type SandboxCreateOptions } from './sandbox.js';
export { Process, type AttachOptions } from './process.js';
export { Files, type FileData } from './files.js';
export { Desktop } from './desktop.js';
export {
  Transport, parseHost, DEFAULT_HOST, type ClientOptions, type Endpoint, type RequestSpec, type AttemptInfo,
} from './http.js';
export { packDir, extractTar, ArchiveError, type PackStats, type ExtractStats } from './tar.js';
export * from './errors.js';
export type * from './types.js';
