// Command plot draws the CDF plots of BENCHMARKS.md from the data TestBenchReport writes
// (tests/bench/plots/cdf.json): per agreement case, ours against fio, one line per round, the
// whole CDF on the left and its tail (1 − CDF, log scale) on the right. It is a module of
// its own so that no other go.mod, the daemon's or the tests', carries a plotting library.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"log"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Point, Case and Data mirror internal/benchkit.PlotData (this module cannot import the
// exporter's internal packages).
type Point struct {
	Seconds  float64 `json:"s"`
	Fraction float64 `json:"f"`
}

type Case struct {
	ID     string    `json:"id"`
	Title  string    `json:"title"`
	XLabel string    `json:"xlabel"`
	Ours   [][]Point `json:"ours"`
	Fio    [][]Point `json:"fio"`
	Legend [2]string `json:"legend"`
}

type Data struct {
	Cases []Case `json:"cases"`
}

var (
	oursColor = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	fioColor  = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

func main() {
	in := flag.String("in", "tests/bench/plots/cdf.json", "data written by TestBenchReport")
	out := flag.String("out", "tests/bench/plots", "directory for the PNG files")
	flag.Parse()
	raw, err := os.ReadFile(*in)
	if err != nil {
		log.Fatal(err)
	}
	var d Data
	if err := json.Unmarshal(raw, &d); err != nil {
		log.Fatal(err)
	}
	for _, c := range d.Cases {
		path := filepath.Join(*out, c.ID+".png")
		if err := draw2(c, path); err != nil {
			log.Fatalf("%s: %v", c.ID, err)
		}
		fmt.Println("wrote", path)
	}
}

func draw2(c Case, path string) error {
	cdf, tail := plot.New(), plot.New()
	cdf.Title.Text = c.Title
	tail.Title.Text = "tail: share of operations slower than x"
	for _, p := range []*plot.Plot{cdf, tail} {
		p.X.Label.Text = c.XLabel
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = durationTicks{}
		p.Add(plotter.NewGrid())
	}
	cdf.Y.Label.Text = "share of operations ≤ x"
	cdf.Y.Min, cdf.Y.Max = 0, 1
	tail.Y.Label.Text = "1 − CDF"
	tail.Y.Scale = plot.LogScale{}
	tail.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	for side, rounds := range [][][]Point{c.Ours, c.Fio} {
		col, name := oursColor, c.Legend[side]
		if side == 1 {
			col = fioColor
		}
		for i, pts := range rounds {
			var all, over plotter.XYs
			for _, p := range pts {
				if p.Seconds <= 0 {
					continue
				}
				all = append(all, plotter.XY{X: p.Seconds, Y: p.Fraction})
				if 1-p.Fraction > 1e-6 {
					over = append(over, plotter.XY{X: p.Seconds, Y: 1 - p.Fraction})
				}
			}
			for j, set := range []plotter.XYs{all, over} {
				if len(set) == 0 {
					continue
				}
				l, s, err := plotter.NewLinePoints(set)
				if err != nil {
					return err
				}
				l.Color, s.Color = col, col
				l.Width = vg.Points(0.8)
				s.Radius = vg.Points(1.2)
				if side == 0 {
					s.Radius = 0 // ours: every half percent, a line is enough
				}
				p := []*plot.Plot{cdf, tail}[j]
				p.Add(l, s)
				if i == 0 && j == 0 {
					cdf.Legend.Add(fmt.Sprintf("%s (%d rounds)", name, len(rounds)), l, s)
				}
			}
		}
	}
	cdf.Legend.Top, cdf.Legend.Left = false, false
	cdf.Legend.XOffs, cdf.Legend.YOffs = -vg.Millimeter*10, vg.Millimeter*4
	img := vgimg.New(vg.Points(960), vg.Points(400))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 2, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{{cdf, tail}}, tiles, dc)
	cdf.Draw(canvases[0][0])
	tail.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// durationTicks labels a logarithmic seconds axis in µs, ms and s at 1-2-5 steps.
type durationTicks struct{}

func (durationTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < min || v > max {
				continue
			}
			ticks = append(ticks, plot.Tick{Value: v, Label: label(v)})
		}
	}
	return ticks
}

func label(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%gs", s)
	case s >= 1e-3:
		return fmt.Sprintf("%gms", math.Round(s*1e6)/1e3)
	default:
		return fmt.Sprintf("%gµs", math.Round(s*1e9)/1e3)
	}
}
