// Package benchkit is what the benchmarks in bench/ share: running fio and reading its
// JSON, running a probe loop in a child process, and writing BENCHMARKS.md. It is
// internal so that it is no public API of the module.
package benchkit
