// graphile-worker's documented settings for throughput (its "Performance"
// page): fetch up to 500 jobs at a time into a local queue, and complete and
// fail jobs in batches without waiting. Passed with `-C` for the "tuned" run
// only; the "defaults" run has no configuration file (and the worker finds
// none: this one is not named graphile.config.*).
module.exports = {
  worker: {
    localQueue: { size: 500 },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
};
