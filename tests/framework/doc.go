// Package framework runs the programs the suites of the tests module drive from outside:
// the exporter as a daemon (started on a free port, scraped, its metrics waited for),
// Prometheus 2.42 and 3 side by side, a single-member etcd, helm, and the pinned tools
// scripts/tools.sh builds. The real-kernel fixtures these tests also need (loop devices,
// mounts, cgroups, HangFS) are internal/testenv, shared with the daemon's unit tests.
package framework
