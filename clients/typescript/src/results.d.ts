// What openapi.json leaves untyped in a task view (`results` items and `error` are `{}` there),
// typed from docs/api.md ("A task's view"). Hand-written: the generated models import these.

import type { UnitStatus } from './models.js';

/** A unit's error: the provider's code (when it gave one) and message. */
export interface TaskError {
  code?: string | null;
  message: string;
  [key: string]: unknown;
}

/** A routed unit's route (docs/routes.md): the target that serves it and those that refused it. */
export interface TaskResultRoute {
  route: string;
  handler?: string;
  model?: string;
  pool?: string;
  refused?: { handler: string; model: string; reason: string; message: string; at: number }[];
}

/** A stored artifact of a unit. */
export interface TaskArtifact {
  object_key?: string;
  bytes?: number;
  sha256?: string;
  [key: string]: unknown;
}

/**
 * One entry of a task view's `results`, by unit index: the fixed keys below, plus the keys of
 * the unit's result (the fixed keys win over result keys of the same name).
 */
export interface TaskResult {
  index: number;
  status: UnitStatus;
  stage: string;
  provider_task_id: string | null;
  /** The first stored artifact's object key, size and sha256 (every one under `artifacts`). */
  object_key?: string;
  bytes?: number;
  sha256?: string;
  artifacts?: TaskArtifact[];
  /** Avatar clones. */
  voice_id?: string;
  element_id?: string;
  /** The provider account that ran the unit. */
  account?: string;
  cost_estimate?: number;
  /** The provider's reported cost (a number when it reads as one, else its text). */
  cost?: number | string;
  /** Why a unit waits: a pending unit waits for slotd, a submitted one in the provider's queue. */
  wait_reason?: string;
  provider_queue_position?: number;
  route?: TaskResultRoute;
  /** Where the unit failed or is retrying. */
  error?: TaskError;
  [key: string]: unknown;
}
