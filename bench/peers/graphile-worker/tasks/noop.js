// The no-op task of ledger-bench --peers: the job is done as soon as it runs.
module.exports = async () => {};
