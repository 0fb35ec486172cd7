package check

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress shows how far the check is: a bar with an ETA redrawn in place on a terminal,
// plain lines every Interval otherwise (a log file or CI output should not fill with
// carriage returns). It writes to its own writer, stderr in the command, so that stdout
// carries only the summary or the JSON.
type Progress struct {
	w        io.Writer
	tty      bool
	interval time.Duration
	now      func() time.Time
}

// NewProgress writes progress to w; tty selects the redrawn bar. interval is how often a
// line is written (plain) or the bar redrawn (terminal).
func NewProgress(w io.Writer, tty bool, interval time.Duration) *Progress {
	return &Progress{w: w, tty: tty, interval: interval, now: time.Now}
}

// status reports a phase's completion (0 to 1) and a detail line, given the time since
// the phase started. It is called from the progress goroutine.
type status func(elapsed time.Duration) (fraction float64, detail string)

const barWidth = 30

// start shows the phase name until the returned stop is called with whether the phase
// completed. A nil Progress shows nothing.
func (p *Progress) start(name string, st status) (stop func(ok bool)) {
	if p == nil {
		return func(bool) {}
	}
	begin := p.now()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(p.interval)
		defer t.Stop()
		if p.tty {
			p.draw(name, st, p.now().Sub(begin), false)
		}
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				p.draw(name, st, p.now().Sub(begin), false)
			}
		}
	}()
	var once sync.Once
	return func(ok bool) {
		once.Do(func() {
			close(quit)
			wg.Wait()
			if ok {
				p.draw(name, st, p.now().Sub(begin), true)
			} else if p.tty {
				_, _ = fmt.Fprintln(p.w) // keep the last bar, end its line
			}
		})
	}
}

func (p *Progress) draw(name string, st status, elapsed time.Duration, final bool) {
	f, detail := st(elapsed)
	if final {
		f = 1
	}
	if !p.tty {
		switch {
		case final:
			_, _ = fmt.Fprintf(p.w, "%s: done in %s: %s\n", name, formatSeconds(elapsed), detail)
		default:
			_, _ = fmt.Fprintf(p.w, "%s: %3.0f%%  %s  elapsed %s  ETA %s\n", name, 100*f, detail, formatSeconds(elapsed), eta(f, elapsed))
		}
		return
	}
	filled := max(0, min(int(f*barWidth), barWidth))
	bar := strings.Repeat("=", filled)
	if filled < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-filled-1)
	}
	line := fmt.Sprintf("%-9s [%s] %3.0f%%  %s  ", name, bar, 100*f, detail)
	if final {
		line += "in " + formatSeconds(elapsed)
	} else {
		line += "ETA " + eta(f, elapsed)
	}
	// \r and erase-to-end-of-line redraw the bar in place.
	_, _ = fmt.Fprintf(p.w, "\r%s\x1b[K", line)
	if final {
		_, _ = fmt.Fprintln(p.w)
	}
}

// eta extrapolates the rate so far to the remaining share.
func eta(f float64, elapsed time.Duration) string {
	if f <= 0 {
		return "--"
	}
	if f >= 1 {
		return "0s"
	}
	return formatSeconds(time.Duration(float64(elapsed) * (1 - f) / f))
}

func formatSeconds(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return (d.Round(time.Second)).String()
	}
	return d.Round(time.Minute).String()
}

// note writes one line ahead of the phases, such as how long the run will take. A nil
// Progress writes nothing.
func (p *Progress) note(line string) {
	if p != nil {
		_, _ = fmt.Fprintln(p.w, line)
	}
}
