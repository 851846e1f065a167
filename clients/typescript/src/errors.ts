// Why a call did not produce an answer. A definite refusal is a
// ProblemError (409 and 422 have classes of their own, never retried);
// GaveUpError means every attempt the retry policy allowed failed for a
// reason worth retrying. An `ambiguous` command is not an error: it is an
// outcome, because an exception invites exactly the blind retry that must
// not happen.

import type { Problem, ProblemType } from "./types.js";

export class LedgerError extends Error {
  override name = "LedgerError";
}

/** The server refused the request with a problem document (RFC 9457). */
export class ProblemError extends LedgerError {
  override name = "ProblemError";
  readonly status: number;
  readonly type: ProblemType | string;
  readonly detail: string;
  /** The whole document (it may carry more, such as `command_id`). */
  readonly problem: Problem;

  constructor(status: number, problem: Problem) {
    super(`${status} ${problem.type}: ${problem.detail}`);
    this.status = status;
    this.type = problem.type;
    this.detail = problem.detail;
    this.problem = problem;
  }
}

/** 409: a decision, never retried (too late to cancel, a near-duplicate refused, a hold decided, ...). */
export class ConflictError extends ProblemError {
  override name = "ConflictError";
}

/** 422: the idempotency key was used before for a different request. */
export class KeyConflictError extends ProblemError {
  override name = "KeyConflictError";
}

/** The connection failed or the answer did not arrive. */
export class TransportError extends LedgerError {
  override name = "TransportError";
}

/** A transient refusal (429, 500, 502, 503, 504) as the last attempt saw it. */
export class TransientError extends LedgerError {
  override name = "TransientError";
  constructor(
    readonly status: number,
    readonly body: string,
    readonly retryAfterMs: number | undefined,
  ) {
    super(`${status} (retryable): ${body.slice(0, 200)}`);
  }
}

/** Every attempt allowed failed for a reason worth retrying. For a submission
 * the command may or may not have been recorded: resubmit under `key` later. */
export class GaveUpError extends LedgerError {
  override name = "GaveUpError";
  key: string | undefined;
  constructor(
    readonly attempts: number,
    readonly elapsedMs: number,
    readonly last: LedgerError,
  ) {
    super(`gave up after ${attempts} attempts in ${(elapsedMs / 1000).toFixed(1)} s: ${last.message}`);
  }
}

/** The answer was not what the API documents. */
export class UnexpectedAnswerError extends LedgerError {
  override name = "UnexpectedAnswerError";
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`unexpected answer (${status}): ${body.slice(0, 500)}`);
  }
}

export function problemError(status: number, problem: Problem): ProblemError {
  if (status === 409) return new ConflictError(status, problem);
  if (status === 422) return new KeyConflictError(status, problem);
  return new ProblemError(status, problem);
}
