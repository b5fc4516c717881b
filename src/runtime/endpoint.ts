/** comlink's Node adapter (a CommonJS module with a default export), typed once. */
import type { Endpoint } from 'comlink';
import adapter from 'comlink/dist/umd/node-adapter.js';
import type { NodeEndpoint } from 'comlink/dist/umd/node-adapter.js';

export const nodeEndpoint = ((adapter as unknown as { default?: unknown }).default ?? adapter) as (nep: NodeEndpoint) => Endpoint;
