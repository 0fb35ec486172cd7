package config

import (
	"strings"
	"testing"
)

func TestBadVantageBlocksNameFileLineAndField(t *testing.T) {
	dir := t.TempDir()
	head := "targets:\n  - name: out\n    path: /srv/a\n  - name: in\n    path: /srv/b\n"
	cases := []struct{ name, body, want string }{
		{"none of the three", head + "    vantage: {outside: out}\n", `diskprobe.yml:6: targets[1].vantage: name the process to take the view of with exactly one of process, pid_file or cgroup`},
		{"two of the three", head + "    vantage:\n      process: etcd\n      pid_file: /run/etcd.pid\n", `diskprobe.yml:7: targets[1].vantage: name the process`},
		{"unknown key", head + "    vantage:\n      process: etcd\n      pid: 7\n", `diskprobe.yml:8: targets[1].vantage: unknown field "pid"`},
		{"a path for a name", head + "    vantage: {process: /usr/bin/etcd}\n", `diskprobe.yml:6: targets[1].vantage.process: expected a process name as /proc/PID/comm shows it (such as etcd), got "/usr/bin/etcd"`},
		{"relative cgroup", head + "    vantage: {cgroup: system.slice/etcd.service}\n", `diskprobe.yml:6: targets[1].vantage.cgroup: expected a cgroup path as /proc/PID/cgroup writes it`},
		{"outside unknown", head + "    vantage:\n      process: etcd\n      outside: nope\n", `diskprobe.yml:8: targets[1].vantage.outside: "nope" is not another target of this file`},
		{"outside itself", head + "    vantage:\n      process: etcd\n      outside: in\n", `diskprobe.yml:8: targets[1].vantage.outside: "in" is not another target of this file`},
		{"outside with a vantage", "targets:\n  - name: a\n    path: /srv/a\n    vantage: {process: etcd, outside: b}\n  - name: b\n    path: /srv/b\n    vantage: {process: etcd, outside: a}\n",
			`diskprobe.yml:4: targets[0].vantage.outside: target "b" has a vantage of its own`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseFile(writeConfig(t, dir, c.body))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error\n  %v\ndoes not contain\n  %s", err, c.want)
			}
		})
	}
}

func TestAVantageBlockParses(t *testing.T) {
	dir := t.TempDir()
	cfg, err := parseFile(writeConfig(t, dir, "targets:\n  - name: etcd\n    path: /var/lib/etcd\n  - name: etcd-as-etcd\n    path: /srv/etcd\n    vantage:\n      pid_file: run/etcd.pid\n      outside: etcd\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Vantage{PIDFile: dir + "/run/etcd.pid", Outside: "etcd"}
	if got := cfg.Targets[1].Vantage; got == nil || *got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if cfg.Targets[0].Vantage != nil {
		t.Fatal("a target without the block has a vantage")
	}
	if s := cfg.Summary(); !strings.Contains(s, "as pid_file "+dir+"/run/etcd.pid sees it") {
		t.Fatal(s)
	}
}

func TestOnePathProbedFromInsideAndOutsideIsTwoTargetsWithTwoProbeDirs(t *testing.T) {
	dir := t.TempDir()
	two := "targets:\n  - name: etcd\n    path: /var/lib/etcd\n    probe_dir: /srv/out\n  - name: etcd-as-etcd\n    path: /var/lib/etcd\n    probe_dir: /srv/in\n    vantage: {process: etcd, outside: etcd}\n"
	if _, err := parseFile(writeConfig(t, dir, two)); err != nil {
		t.Fatal(err)
	}
	oneDir := "targets:\n  - name: etcd\n    path: /var/lib/etcd\n  - name: etcd-as-etcd\n    path: /var/lib/etcd\n    vantage: {process: etcd}\n"
	if _, err := parseFile(writeConfig(t, dir, oneDir)); err == nil || !strings.Contains(err.Error(), "targets[1].path: /var/lib/etcd already holds the probe files of target \"etcd\"") {
		t.Fatalf("two targets' probe files in one directory: %v", err)
	}
	sameView := "targets:\n  - name: a\n    path: /var/lib/etcd\n    vantage: {process: etcd}\n  - name: b\n    path: /var/lib/etcd\n    probe_dir: /srv/b\n    vantage: {process: etcd}\n"
	if _, err := parseFile(writeConfig(t, dir, sameView)); err == nil || !strings.Contains(err.Error(), "is already probed by target \"a\"") {
		t.Fatalf("one path from one place twice: %v", err)
	}
}
