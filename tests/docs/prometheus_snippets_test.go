package docs

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

// The setup the docs give is what users copy: these tests hold it to what the rules, the
// routes and the code need, so that a copied setup detects what the product promises.

// userDocs are the documents users copy setups from: README.md, docs/*.md, the chart's
// README and the examples.
func userDocs(t *testing.T) map[string]string {
	out := documents(t)
	out["charts/diskprobe-exporter/README.md"] = read(t, "charts/diskprobe-exporter/README.md")
	for _, glob := range []string{"examples/*.yml", "examples/kubernetes/*.yaml"} {
		files, err := filepath.Glob(testenv.RepoPath(glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			name := strings.TrimPrefix(f, testenv.RepoPath()+"/")
			out[name] = read(t, name)
		}
	}
	return out
}

// TestPrometheusSnippetsMakePeerGroupsAndScrapeOftenEnough: every scrape configuration in the
// docs scrapes every 30 s or faster (the 2-minute pages need two samples in their window;
// Prometheus's default is 1 minute), and a static list of three or more exporters carries the
// label the peer rules select members by. The README's snippet listed three etcd hosts with
// neither: the peer alerts, their page too, could never fire, and the fast pages were late.
func TestPrometheusSnippetsMakePeerGroupsAndScrapeOftenEnough(t *testing.T) {
	rules := read(t, "alerts/diskprobe.rules.yml")
	if !strings.Contains(rules, `peer_group!=""`) {
		t.Fatal(`the peer rules no longer select members by peer_group!="": update this test`)
	}
	seen := 0
	for name, doc := range userDocs(t) {
		for _, block := range codeBlocks(doc, "yaml", "yml") {
			if !strings.Contains(block, "scrape_configs:") {
				continue
			}
			seen++
			var cfg struct {
				Global struct {
					ScrapeInterval string `yaml:"scrape_interval"`
				} `yaml:"global"`
				ScrapeConfigs []struct {
					JobName        string `yaml:"job_name"`
					ScrapeInterval string `yaml:"scrape_interval"`
					StaticConfigs  []struct {
						Targets []string          `yaml:"targets"`
						Labels  map[string]string `yaml:"labels"`
					} `yaml:"static_configs"`
				} `yaml:"scrape_configs"`
			}
			if err := yaml.Unmarshal([]byte(block), &cfg); err != nil {
				t.Errorf("%s: a Prometheus snippet does not parse: %v\n%s", name, err, block)
				continue
			}
			for _, sc := range cfg.ScrapeConfigs {
				interval := firstSet(sc.ScrapeInterval, cfg.Global.ScrapeInterval)
				d, err := time.ParseDuration(interval)
				if interval == "" || err != nil || d > 30*time.Second {
					t.Errorf("%s: job %s scrapes at %q (Prometheus's default 1m when empty); the 2-minute pages need 30s or less", name, sc.JobName, interval)
				}
				for _, st := range sc.StaticConfigs {
					if len(st.Targets) >= 3 && st.Labels["peer_group"] == "" {
						t.Errorf("%s: job %s lists %d exporters with no peer_group label: the peer rules (peer_group!=\"\") make no group of them", name, sc.JobName, len(st.Targets))
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no Prometheus snippet (scrape_configs:) found in the docs")
	}
}

// firstSet is a if it is set, else b.
func firstSet(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
