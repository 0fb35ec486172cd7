// Package sharding runs the alert replay's scenarios (tests/internal/alertreplay) on what
// evaluates the rules beyond one Prometheus, and compares each alert's first firing with the
// replay's own (Prometheus's rule manager and engine, in process):
//
//   - two Prometheus shards, each group of peers on one shard (hashmod of the peer_group label):
//     each shard's rules see only its own members, as a sharded Prometheus's do;
//   - a group split across the two shards: the shards are real Prometheus 3 servers (the
//     scenario's series backfilled with promtool tsdb create-blocks-from openmetrics), each
//     behind a Thanos sidecar, a Thanos querier over both, and the rules evaluated through that
//     querier as Thanos Ruler evaluates them, writing what they record into a third Prometheus
//     the querier also reads (Thanos Ruler's own TSDB and store API in a real deployment);
//   - VictoriaMetrics single-node with vmalert's replay mode evaluating the same rule file.
//
// The tools are the pinned builds of scripts/tools.sh (prometheus, thanos, victoriametrics).
// The comparison runs in `make bench` (TestShardingReport, its section of BENCHMARKS.md), not
// in `make test`: Thanos and VictoriaMetrics are not among the tools CI builds, and vmalert's
// replay pauses 6 s between chained rules (8 minutes for the rule file, however short the
// scenario). TestThanosReplay and TestVictoriaMetricsReplay run one backend on the scenarios
// whose names start with DISKPROBE_SHARDING_ONLY and log the comparison, e.g.
//
//	DISKPROBE_SHARDING_ONLY="group: " go -C tests test ./sharding -run TestThanosReplay -v
//
// DISKPROBE_SHARDING_RULES names another rule file to replay (default alerts/diskprobe.rules.yml).
package sharding
