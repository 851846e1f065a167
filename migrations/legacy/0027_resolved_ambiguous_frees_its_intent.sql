-- An ambiguous command that a resolution (an operator's, or the reconcile
-- probe's) later says was `not_applied` is as definite as a failure: like a
-- failed, expired or cancelled command, it frees its intent for another run
-- when the kind's on_failure is `release`, and the next command of the
-- intent names it in retry_of. An unresolved ambiguous command, or one
-- resolved `applied`, still never frees its intent. Admission decides this
-- (src/ledger/submit.rs); only the column's description changes here.

comment on column commands.retry_of is
    'The command of the same intent this one retries: that one ended with nothing done (failed, expired, cancelled, '
    'or ambiguous and resolved not_applied), and the kind releases such intents (on_failure = release). Null '
    'otherwise. Not a foreign key: the retried command may be pruned first.';
