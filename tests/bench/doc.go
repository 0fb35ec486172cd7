// Package bench measures diskprobe_exporter against fio and against its own promises:
// latency agreement with fio, the prober's CPU, memory and disk cost, the scrape cost at
// scale, and check's queue-depth jobs (sweep, randrw) against fio's libaio. It drives the
// probe package directly, so what it measures is the code the daemon runs. `make bench`
// runs TestBenchReport, which rewrites BENCHMARKS.md; the Go benchmarks in hotpath_test.go
// cover allocations and contention on the hot paths; TestRuleScale (its own env var, also
// run by make bench) measures the CPU the shipped alert rules cost Prometheus 3 at 1,000 and
// 10,000 synthetic targets on backfilled history; TestLivePeerGroupPagesTheFailingDisk (also
// make bench) runs the rules live against three exporters, one on a throttled disk;
// TestVantageAgreement (also make bench) sets a probe inside a capped etcd's cgroup against
// etcd's own wal_fsync; TestCeilingReport (also make bench) runs the device-ceiling scenario
// of internal/ceilingcase at the default probe rate. The library the tests share (fio runs, probe loops in a child process,
// the report) lives in internal/benchkit, so it is not public API of the module.
package bench
