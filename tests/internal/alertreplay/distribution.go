// Package alertreplay measures the shipped alert rules: it replays fdatasync latency
// distributions through a simulation of the exporter's default fsync probe and a 15 s
// scrape, evaluates alerts/*.yml with Prometheus's own rule engine over days or weeks of
// simulated time, and reports when each alert first fires after a disk turns bad, and how
// often it fires on a healthy one.
package alertreplay

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Distribution is the latency of one fdatasync, in seconds.
type Distribution interface {
	Sample(r *rand.Rand) float64
	String() string
}

// Empirical draws from recorded per-operation latencies (a bootstrap: each draw is one
// recorded operation, picked at random).
type Empirical struct {
	Name    string
	Seconds []float64 // sorted
	Source  []string  // the file's comment lines: where and how it was recorded
}

// Sample draws one latency in seconds.
func (e *Empirical) Sample(r *rand.Rand) float64 { return e.Seconds[r.IntN(len(e.Seconds))] }
func (e *Empirical) String() string              { return e.Name }

// LoadEmpirical reads a latency recording: comment lines starting with '#', then one
// operation per line, in microseconds.
func LoadEmpirical(path string) (*Empirical, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	e := &Empirical{Name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		switch {
		case text == "":
		case strings.HasPrefix(text, "#"):
			e.Source = append(e.Source, strings.TrimSpace(strings.TrimPrefix(text, "#")))
		default:
			us, err := strconv.ParseFloat(text, 64)
			if err != nil || us <= 0 || math.IsInf(us, 0) {
				return nil, fmt.Errorf("%s:%d: latency %q: want a positive number of microseconds", path, line, text)
			}
			e.Seconds = append(e.Seconds, us/1e6)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(e.Seconds) == 0 {
		return nil, fmt.Errorf("%s: no latencies", path)
	}
	slices.Sort(e.Seconds)
	return e, nil
}

// PercentileTable draws from a latency distribution given as percentiles, as fio prints
// them: between two listed percentiles the latency is interpolated on a log scale (disk
// latencies spread over decades), below the first it is the first, above the last the last.
type PercentileTable struct {
	Name   string
	P      []float64 // percentiles, ascending, 0 < p ≤ 100
	Second []float64 // latency at each
	Source []string
}

func (p *PercentileTable) String() string { return p.Name }

// Sample draws one latency in seconds.
func (p *PercentileTable) Sample(r *rand.Rand) float64 {
	u := 100 * r.Float64()
	i, _ := slices.BinarySearch(p.P, u)
	if i == 0 {
		return p.Second[0]
	}
	if i == len(p.P) {
		return p.Second[len(p.P)-1]
	}
	f := (u - p.P[i-1]) / (p.P[i] - p.P[i-1])
	lo, hi := math.Log(p.Second[i-1]), math.Log(p.Second[i])
	return math.Exp(lo + f*(hi-lo))
}

var (
	fioHeader = regexp.MustCompile(`^(?:clat|lat|sync|slat)?\s*percentiles\s*\((nsec|usec|msec)\)\s*:`)
	fioPair   = regexp.MustCompile(`(\d+(?:\.\d+)?)th=\[\s*(\d+(?:\.\d+)?)\s*\]`)
)

// LoadPercentileTable reads a percentile table in fio's text output format:
//
//	# source: where it comes from
//	  sync percentiles (usec):
//	   |  1.00th=[  100],  5.00th=[  111], 10.00th=[  116], ...
//
// Comment lines start with '#'. The unit comes from the header line.
func LoadPercentileTable(path string) (*PercentileTable, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	t := &PercentileTable{Name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))}
	scale := 0.0
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		if strings.HasPrefix(text, "#") {
			t.Source = append(t.Source, strings.TrimSpace(strings.TrimPrefix(text, "#")))
			continue
		}
		if m := fioHeader.FindStringSubmatch(text); m != nil {
			if scale != 0 {
				return nil, fmt.Errorf("%s:%d: a second percentile header: one table per file", path, line)
			}
			scale = map[string]float64{"nsec": 1e-9, "usec": 1e-6, "msec": 1e-3}[m[1]]
			continue
		}
		pairs := fioPair.FindAllStringSubmatch(text, -1)
		if len(pairs) == 0 {
			return nil, fmt.Errorf("%s:%d: %q: want fio's percentile lines (|  1.00th=[  100], ...)", path, line, text)
		}
		if scale == 0 {
			return nil, fmt.Errorf("%s:%d: percentiles before a header such as \"sync percentiles (usec):\"", path, line)
		}
		for _, m := range pairs {
			pct, _ := strconv.ParseFloat(m[1], 64)
			v, _ := strconv.ParseFloat(m[2], 64)
			if pct <= 0 || pct > 100 {
				return nil, fmt.Errorf("%s:%d: percentile %sth: want 0 < p ≤ 100", path, line, m[1])
			}
			if n := len(t.P); n > 0 && (pct <= t.P[n-1] || v*scale < t.Second[n-1]) {
				return nil, fmt.Errorf("%s:%d: %sth=[%s]: percentiles and latencies must ascend", path, line, m[1], m[2])
			}
			if v <= 0 {
				v = 1 // fio prints 0 for sub-unit latencies; one unit is the honest floor
			}
			t.P = append(t.P, pct)
			t.Second = append(t.Second, v*scale)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(t.P) < 2 {
		return nil, fmt.Errorf("%s: fewer than two percentiles", path)
	}
	return t, nil
}

// Mixture draws from its parts in proportion to their weights: a healthy disk with rare
// stalls is the disk's distribution with a small weight of a stall distribution.
type Mixture struct {
	Name    string
	Parts   []Distribution
	Weights []float64 // sum to 1
}

func (m *Mixture) String() string { return m.Name }

// Sample draws one latency in seconds.
func (m *Mixture) Sample(r *rand.Rand) float64 {
	u := r.Float64()
	for i, w := range m.Weights {
		if u < w {
			return m.Parts[i].Sample(r)
		}
		u -= w
	}
	return m.Parts[len(m.Parts)-1].Sample(r)
}

// WithStalls is d with a share of its operations replaced by stalls.
func WithStalls(d Distribution, share float64, stall Distribution) *Mixture {
	return &Mixture{
		Name:    fmt.Sprintf("%s + %.2g %% at %s", d, 100*share, stall),
		Parts:   []Distribution{d, stall},
		Weights: []float64{1 - share, share},
	}
}

// LogUniform is a latency spread evenly on a log scale between Lo and Hi seconds.
type LogUniform struct{ Lo, Hi float64 }

// Sample draws one latency in seconds.
func (u LogUniform) Sample(r *rand.Rand) float64 {
	return math.Exp(math.Log(u.Lo) + r.Float64()*(math.Log(u.Hi)-math.Log(u.Lo)))
}
func (u LogUniform) String() string { return fmt.Sprintf("%s–%s", seconds(u.Lo), seconds(u.Hi)) }

// Scaled is d with every latency multiplied by Factor: a uniform degradation.
type Scaled struct {
	D      Distribution
	Factor float64
}

// Sample draws one latency in seconds.
func (s Scaled) Sample(r *rand.Rand) float64 { return s.Factor * s.D.Sample(r) }
func (s Scaled) String() string              { return fmt.Sprintf("%g× %s", s.Factor, s.D) }

// seconds prints a latency the way an operator reads it.
func seconds(s float64) string {
	switch {
	case s >= 1:
		return strconv.FormatFloat(s, 'g', 3, 64) + " s"
	case s >= 1e-3:
		return strconv.FormatFloat(s*1e3, 'g', 3, 64) + " ms"
	default:
		return strconv.FormatFloat(s*1e6, 'g', 3, 64) + " µs"
	}
}
