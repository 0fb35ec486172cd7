package sharding

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/diskprobe/diskprobe_exporter/tests/internal/alertreplay"
)

// tolerance is how far a backend's first firing may be from Prometheus's and still count as
// the same alert.
const tolerance = 2 * time.Minute

// row compares one alert (name and severity) in one scenario: Prometheus's first firing after
// the onset (or, in a healthy scenario, its false episodes) against a backend's.
type row struct {
	Scenario, Alert, Severity string
	Ref, Got                  string
	Delta                     time.Duration // Got - Ref when both fired; 0 otherwise
	Same                      bool
}

func (r row) diff() string {
	switch {
	case r.Same && r.Delta == 0:
		return "same"
	case r.Same:
		return fmt.Sprintf("%+.0f min", r.Delta.Minutes())
	case r.Delta != 0:
		return fmt.Sprintf("**%+.0f min**", r.Delta.Minutes())
	}
	return "**differs**"
}

func describe(res *alertreplay.Result, f *alertreplay.Firing) string {
	if f == nil {
		return "—"
	}
	var s string
	switch {
	case res.Scenario.Onset < 0:
		s = fmt.Sprintf("%d false", f.False)
	case f.Detected < 0:
		s = fmt.Sprintf("before onset only (%d false)", f.False)
	default:
		s = fmt.Sprintf("%.0f min", math.Round(f.Detected.Minutes()))
		if f.False > 0 {
			s += fmt.Sprintf(", %d false", f.False)
		}
	}
	if len(f.Instances) > 0 && len(f.Instances) < 4 {
		s += " (" + strings.Join(f.Instances, ", ") + ")"
	}
	return s
}

// compare lists every alert that fired in either result.
func compare(ref, got *alertreplay.Result) []row {
	var rows []row
	seen := map[[2]string]bool{}
	add := func(alert, sev string) {
		k := [2]string{alert, sev}
		if seen[k] {
			return
		}
		seen[k] = true
		a, b := ref.Fired(alert, sev), got.Fired(alert, sev)
		r := row{Scenario: ref.Scenario.Name, Alert: alert, Severity: sev, Ref: describe(ref, a), Got: describe(got, b)}
		switch {
		case a == nil || b == nil:
		case a.Detected >= 0 && b.Detected >= 0:
			r.Delta = b.Detected - a.Detected
			r.Same = r.Delta.Abs() <= tolerance && a.False == b.False && strings.Join(a.Instances, ",") == strings.Join(b.Instances, ",")
		default:
			r.Same = a.Detected < 0 && b.Detected < 0 && a.False == b.False && strings.Join(a.Instances, ",") == strings.Join(b.Instances, ",")
		}
		rows = append(rows, r)
	}
	for _, f := range ref.Firings {
		add(f.Alert, f.Severity)
	}
	for _, f := range got.Firings {
		add(f.Alert, f.Severity)
	}
	if len(rows) == 0 {
		rows = append(rows, row{Scenario: ref.Scenario.Name, Alert: "(nothing fired)", Ref: "—", Got: "—", Same: true})
	}
	return rows
}
