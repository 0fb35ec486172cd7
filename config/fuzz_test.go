package config

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the parser: it must never panic, and every error
// must be located in the file.
func FuzzParse(f *testing.F) {
	f.Add([]byte("targets:\n  - name: etcd\n    path: /var/lib/etcd\n    fsync: {interval: 15s, ops: 20, block_size: 2300, file_size: 64MiB}\n    randread: {interval: 15s, ops: 20, block_size: 4KiB, file_size: 256MiB}\n    seqread: {interval: 10m, bytes: 64MiB, block_size: 1MiB}\n    seqwrite: {interval: 1h, bytes: 64MiB, block_size: 1MiB}\n    commit: {interval: 15s, ops: 10, pages: 10, file_size: 128MiB}\n    limits: {iops: 100, bandwidth: 20MiB, timeout: 30s, min_free: 1GiB}\n"))
	f.Add([]byte("targets:\n  - name: nvme\n    path: /dev/nvme0n1\n"))
	f.Add([]byte("targets: []\n"))
	f.Add([]byte("targets:\n  - &a {name: x, path: /tmp}\n  - *a\n"))
	f.Add([]byte("targets:\n  - name: a\n    path: rel\n    fsync:\n    limits: {iops: 1e400}\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, "fuzz.yml")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("error is not a config.Error: %T %v", err, err)
			}
			return
		}
		for _, tg := range cfg.Targets {
			if tg.Name == "" || tg.Path == "" {
				t.Fatalf("accepted a target without name or path: %+v", tg)
			}
			for _, p := range tg.ProbeNames() {
				if tg.Interval(p) < 1e9 {
					t.Fatalf("accepted an interval under 1s: %+v", tg)
				}
			}
			if tg.Limits.IOPS <= 0 || tg.Limits.Bandwidth <= 0 || tg.Limits.Timeout < 1e9 {
				t.Fatalf("accepted bad limits: %+v", tg.Limits)
			}
		}
	})
}
