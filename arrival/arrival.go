// Package arrival measures how long a volume of a storage class takes to arrive: on a
// schedule it creates a small PVC of each class and a pod that writes to it once, times
// the PVC Bound, the pod's container started and the pod Succeeded, deletes both and times
// the PVC gone, and exports those times and the failures by stage.
package arrival

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskprobe/diskprobe_exporter/internal/kubeapi"
)

// The labels of every object the prober makes; leftovers are found by them.
const (
	ComponentLabel = "app.kubernetes.io/component"
	Component      = "arrival"
	ClassLabel     = "diskprobe.io/storage-class"
)

// leftoverSelector selects the objects of an arrival prober.
const leftoverSelector = ComponentLabel + "=" + Component + "," + ClassLabel

// Writer is how the writer pod runs the image's binary: `arrival-write` at the volume.
var (
	WriterCommand = []string{"/bin/diskprobe_exporter"} // the Containerfile's path
	WriterArgs    = []string{"arrival-write", "/volume"}
)

// DefaultPoll is how often a wait asks the API server.
const DefaultPoll = 500 * time.Millisecond

// cleanupWait bounds the deletes after SIGTERM, within a pod's 30 s grace.
const cleanupWait = 10 * time.Second

// API is the part of the Kubernetes API the prober calls (*kubeapi.Client).
type API interface {
	CreatePVC(ctx context.Context, namespace string, claim *kubeapi.PersistentVolumeClaim) (*kubeapi.PersistentVolumeClaim, error)
	GetPVC(ctx context.Context, namespace, name string) (*kubeapi.PersistentVolumeClaim, error)
	ListPVCs(ctx context.Context, namespace, labelSelector string) ([]kubeapi.PersistentVolumeClaim, error)
	DeletePVC(ctx context.Context, namespace, name string) error
	CreatePod(ctx context.Context, namespace string, pod *kubeapi.Pod) (*kubeapi.Pod, error)
	GetPod(ctx context.Context, namespace, name string) (*kubeapi.Pod, error)
	ListPods(ctx context.Context, namespace, labelSelector string) ([]kubeapi.Pod, error)
	DeletePod(ctx context.Context, namespace, name string) error
	ListEvents(ctx context.Context, namespace, name string) ([]kubeapi.Event, error)
}

// Config is what the arrival command's flags say.
type Config struct {
	Classes    []string
	Interval   time.Duration // each class once per interval, the classes staggered over it
	Timeout    time.Duration // per stage
	Size       string        // the PVC's request, as the API writes quantities ("1Gi")
	AccessMode string
	Namespace  string
	Image      string
	// Owner, when not nil, is the arrival pod: the objects made get a reference to it,
	// so that they go when it goes.
	Owner *kubeapi.OwnerReference
	Poll  time.Duration // 0: DefaultPoll
}

// Prober runs the attempts.
type Prober struct {
	api     API
	cfg     Config
	metrics *metrics
	logger  *slog.Logger
}

// New registers the prober's metrics on reg, every class's at 0.
func New(api API, cfg Config, reg prometheus.Registerer, logger *slog.Logger) (*Prober, error) {
	if len(cfg.Classes) == 0 {
		return nil, errors.New("no storage class to probe")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	m, err := newMetrics(reg, cfg.Classes)
	if err != nil {
		return nil, err
	}
	return &Prober{api: api, cfg: cfg, metrics: m, logger: logger}, nil
}

// Run deletes what an earlier run left behind, then probes each class once per interval,
// the classes staggered over it, until ctx ends; it returns once every attempt under way
// has deleted its objects.
func (p *Prober) Run(ctx context.Context) {
	p.deleteLeftovers(ctx)
	start := time.Now()
	var wg sync.WaitGroup
	for i, class := range p.cfg.Classes {
		offset := p.cfg.Interval * time.Duration(i) / time.Duration(len(p.cfg.Classes))
		wg.Go(func() { p.loop(ctx, class, start.Add(offset)) })
	}
	wg.Wait()
}

// loop runs class's attempts at first, first+interval, …; an attempt longer than the
// interval delays the next to the next slot after it.
func (p *Prober) loop(ctx context.Context, class string, first time.Time) {
	next := first
	for {
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		p.attempt(ctx, class)
		for !next.After(time.Now()) {
			next = next.Add(p.cfg.Interval)
		}
	}
}

// deleteLeftovers deletes the pods and PVCs of an arrival prober that this one owns or
// that have no owner: those of a run that crashed or was killed before deleting them.
// Those owned by another pod are another prober's (or its owner's garbage collector's).
func (p *Prober) deleteLeftovers(ctx context.Context) {
	ours := func(m kubeapi.ObjectMeta) bool {
		if p.cfg.Owner != nil && m.OwnedBy(p.cfg.Owner.UID) {
			return true
		}
		return len(m.OwnerReferences) == 0
	}
	pods, err := p.api.ListPods(ctx, p.cfg.Namespace, leftoverSelector)
	if err != nil {
		p.logger.Warn("arrival: cannot list leftover pods", "namespace", p.cfg.Namespace, "err", err)
	}
	for _, pod := range pods {
		if ours(pod.Metadata) {
			p.logger.Info("arrival: deleting a leftover pod", "pod", pod.Metadata.Name)
			if err := p.api.DeletePod(ctx, p.cfg.Namespace, pod.Metadata.Name); err != nil {
				p.logger.Warn("arrival: cannot delete a leftover pod", "pod", pod.Metadata.Name, "err", err)
			}
		}
	}
	claims, err := p.api.ListPVCs(ctx, p.cfg.Namespace, leftoverSelector)
	if err != nil {
		p.logger.Warn("arrival: cannot list leftover PVCs", "namespace", p.cfg.Namespace, "err", err)
	}
	for _, c := range claims {
		if ours(c.Metadata) {
			p.logger.Info("arrival: deleting a leftover PVC", "pvc", c.Metadata.Name)
			if err := p.api.DeletePVC(ctx, p.cfg.Namespace, c.Metadata.Name); err != nil {
				p.logger.Warn("arrival: cannot delete a leftover PVC", "pvc", c.Metadata.Name, "err", err)
			}
		}
	}
}

// errTimeout is a wait that did not complete within --timeout.
var errTimeout = errors.New("timed out")

// stageError is a stage that failed: refused, timed out, or ended (a pod Failed).
type stageError struct {
	stage  string
	reason string
}

func (e *stageError) Error() string { return e.stage + ": " + e.reason }

// attempt makes one PVC of class and its writer pod, times their stages and deletes them.
func (p *Prober) attempt(ctx context.Context, class string) {
	p.metrics.attempts.WithLabelValues(class).Inc()
	name := ObjectName(class)
	ns := p.cfg.Namespace
	var made made
	deleted := false
	defer func() {
		if deleted {
			return
		}
		// Interrupted or failed: delete both without waiting for them to go, with a
		// context of its own, since ctx may be what ended.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupWait)
		defer cancel()
		if made.pod {
			if err := p.api.DeletePod(dctx, ns, name); err != nil {
				p.logger.Warn("arrival: cannot delete the writer pod", "storage_class", class, "pod", name, "err", err)
			}
		}
		if !made.pvc {
			return
		}
		if err := p.api.DeletePVC(dctx, ns, name); err != nil {
			p.logger.Warn("arrival: cannot delete the PVC", "storage_class", class, "pvc", name, "err", err)
		}
	}()

	start := time.Now() // monotonic: the observations are differences from it
	err := p.stages(ctx, class, name, start, &made)
	if err == nil {
		deleteStart := time.Now()
		err = p.deleteAndWait(ctx, name)
		if err == nil {
			deleted = true
			p.metrics.seconds.WithLabelValues(class, StageDeleted).Observe(time.Since(deleteStart).Seconds())
			p.metrics.lastSuccess.WithLabelValues(class).SetToCurrentTime()
			p.logger.Debug("arrival: attempt succeeded", "storage_class", class, "pvc", name, "seconds", time.Since(start).Seconds())
			return
		}
	}
	if ctx.Err() != nil {
		p.logger.Info("arrival: attempt interrupted; deleting its PVC and pod", "storage_class", class, "pvc", name)
		return
	}
	var se *stageError
	if !errors.As(err, &se) {
		se = &stageError{stage: StageCreate, reason: err.Error()}
	}
	p.metrics.failures.WithLabelValues(class, se.stage).Inc()
	p.logger.Warn("arrival: attempt failed", "storage_class", class, "stage", se.stage, "pvc", name, "pod", name, "reason", se.reason, "seconds", time.Since(start).Seconds())
}

// stages creates the PVC and the pod and waits for them through the stages bound,
// running and written, observing each.
func (p *Prober) stages(ctx context.Context, class, name string, start time.Time, made *made) error {
	ns := p.cfg.Namespace
	_, err := p.api.CreatePVC(ctx, ns, p.claim(class, name))
	made.pvc = mayExist(err)
	if err != nil {
		return &stageError{StageCreate, "creating the PVC: " + err.Error()}
	}
	_, err = p.api.CreatePod(ctx, ns, p.pod(class, name))
	made.pod = mayExist(err)
	if err != nil {
		return &stageError{StageCreate, "creating the writer pod: " + err.Error()}
	}
	observe := func(stage string) {
		p.metrics.seconds.WithLabelValues(class, stage).Observe(time.Since(start).Seconds())
	}

	var claim *kubeapi.PersistentVolumeClaim
	err = p.wait(ctx, func(ctx context.Context) (bool, error) {
		c, err := p.api.GetPVC(ctx, ns, name)
		if err != nil {
			return false, err
		}
		claim = c
		return c.Status.Phase == "Bound", nil
	})
	if err != nil {
		return p.failed(ctx, StageBound, name, err, claimState(claim))
	}
	observe(StageBound)

	var pod *kubeapi.Pod
	err = p.wait(ctx, func(ctx context.Context) (bool, error) {
		got, err := p.api.GetPod(ctx, ns, name)
		if err != nil {
			return false, err
		}
		pod = got
		switch got.Status.Phase {
		case "Running", "Succeeded":
			return true, nil
		case "Failed":
			if terminated(got) != nil {
				return true, nil // it ran; the written stage says how it ended
			}
			return false, &ended{"pod Failed before its container started"}
		}
		return false, nil
	})
	if err != nil {
		return p.failed(ctx, StageRunning, name, err, podState(pod))
	}
	observe(StageRunning)

	err = p.wait(ctx, func(ctx context.Context) (bool, error) {
		got, err := p.api.GetPod(ctx, ns, name)
		if err != nil {
			return false, err
		}
		pod = got
		switch got.Status.Phase {
		case "Succeeded":
			return true, nil
		case "Failed":
			return false, &ended{"pod Failed"}
		}
		return false, nil
	})
	if err != nil {
		return p.failed(ctx, StageWritten, name, err, podState(pod))
	}
	observe(StageWritten)
	return nil
}

// made says which of an attempt's objects it may have created, and so must delete: not
// one whose create the API server refused (a name taken is another's object).
type made struct{ pvc, pod bool }

// mayExist reports whether an object may exist after its create call answered err: the
// API server refused it, or the call did not get an answer.
func mayExist(err error) bool {
	var refused *kubeapi.Error
	return !errors.As(err, &refused)
}

// deleteAndWait deletes the pod and the PVC and waits until the PVC is gone (the PV
// would need a cluster-wide role to be seen).
func (p *Prober) deleteAndWait(ctx context.Context, name string) error {
	ns := p.cfg.Namespace
	if err := p.api.DeletePod(ctx, ns, name); err != nil {
		return &stageError{StageDeleted, "deleting the writer pod: " + err.Error()}
	}
	if err := p.api.DeletePVC(ctx, ns, name); err != nil {
		return &stageError{StageDeleted, "deleting the PVC: " + err.Error()}
	}
	var claim *kubeapi.PersistentVolumeClaim
	err := p.wait(ctx, func(ctx context.Context) (bool, error) {
		c, err := p.api.GetPVC(ctx, ns, name)
		if kubeapi.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		claim = c
		return false, nil
	})
	if err != nil {
		return p.failed(ctx, StageDeleted, name, err, claimState(claim))
	}
	return nil
}

// ended is a wait's object in a state it will not leave (a pod Failed).
type ended struct{ what string }

func (e *ended) Error() string { return e.what }

// wait asks done every poll until it answers true, answers an *ended, --timeout passes
// or ctx ends. An API error does not end it (the API server may be restarting); the last
// one is returned on a timeout.
func (p *Prober) wait(parent context.Context, done func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(parent, p.cfg.Timeout)
	defer cancel()
	var last error
	for {
		ok, err := done(ctx)
		if ok {
			return nil
		}
		var e *ended
		if errors.As(err, &e) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			switch {
			case parent.Err() != nil:
				return parent.Err()
			case last != nil:
				return fmt.Errorf("%w (last API error: %v)", errTimeout, last)
			}
			return errTimeout
		case <-time.After(p.cfg.Poll):
		}
	}
}

// failed is the stageError of a wait that failed, with what the object says and its last
// event: the reason an operator looks for.
func (p *Prober) failed(ctx context.Context, stage, name string, err error, state string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	reason := err.Error()
	if errors.Is(err, errTimeout) {
		reason = fmt.Sprintf("not %s after %s", stage, p.cfg.Timeout)
		if stage == StageDeleted {
			reason = fmt.Sprintf("PVC not gone %s after its delete", p.cfg.Timeout)
		}
		if last := strings.TrimPrefix(err.Error(), errTimeout.Error()); last != "" {
			reason += last
		}
	}
	if state != "" {
		reason += "; " + state
	}
	if ev := p.lastEvent(ctx, name); ev != "" {
		reason += "; last event: " + ev
	}
	return &stageError{stage, reason}
}

// lastEvent is the latest event about the PVC or the pod (they share the name).
func (p *Prober) lastEvent(ctx context.Context, name string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	events, err := p.api.ListEvents(ctx, p.cfg.Namespace, name)
	if err != nil || len(events) == 0 {
		return ""
	}
	last := slices.MaxFunc(events, func(a, b kubeapi.Event) int { return a.When().Compare(b.When()) })
	return fmt.Sprintf("%s %s: %s", last.Type, last.Reason, last.Message)
}

func claimState(c *kubeapi.PersistentVolumeClaim) string {
	if c == nil {
		return ""
	}
	return "PVC " + orUnknown(c.Status.Phase)
}

func podState(pod *kubeapi.Pod) string {
	if pod == nil {
		return ""
	}
	s := "pod " + orUnknown(pod.Status.Phase)
	if pod.Status.Reason != "" || pod.Status.Message != "" {
		s += " (" + strings.TrimSpace(pod.Status.Reason+" "+pod.Status.Message) + ")"
	}
	for _, cs := range pod.Status.ContainerStatuses {
		switch st := cs.State; {
		case st.Waiting != nil:
			s += ", container waiting: " + strings.TrimSpace(st.Waiting.Reason+" "+st.Waiting.Message)
		case st.Terminated != nil:
			s += fmt.Sprintf(", container exited %d", st.Terminated.ExitCode)
			if m := strings.TrimSpace(st.Terminated.Reason + " " + st.Terminated.Message); m != "" {
				s += ": " + m
			}
		}
	}
	return s
}

func terminated(pod *kubeapi.Pod) *kubeapi.ContainerStateTerminated {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}

func orUnknown(phase string) string {
	if phase == "" {
		return "(no phase yet)"
	}
	return phase
}

// ObjectName is a new name for an attempt's PVC and pod: diskprobe-arrival-<class>-<5
// random characters>, the class made a DNS label and cut so that the whole is at most 63
// characters (a pod's hostname).
func ObjectName(class string) string {
	const prefix, maxClass = "diskprobe-arrival-", 63 - len("diskprobe-arrival-") - 6
	var b strings.Builder
	for _, r := range strings.ToLower(class) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := b.String()
	if len(s) > maxClass {
		s = s[:maxClass]
	}
	s = strings.Trim(s, "-")
	if s == "" {
		s = "class"
	}
	// The alphabet of Kubernetes' generateName: no vowels, no words.
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	suffix := make([]byte, 5)
	for i := range suffix {
		suffix[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return prefix + s + "-" + string(suffix)
}

func (p *Prober) meta(class, name string) kubeapi.ObjectMeta {
	m := kubeapi.ObjectMeta{
		Name:   name,
		Labels: map[string]string{ComponentLabel: Component, ClassLabel: class},
	}
	if p.cfg.Owner != nil {
		m.OwnerReferences = []kubeapi.OwnerReference{*p.cfg.Owner}
	}
	return m
}

func (p *Prober) claim(class, name string) *kubeapi.PersistentVolumeClaim {
	return &kubeapi.PersistentVolumeClaim{
		Metadata: p.meta(class, name),
		Spec: kubeapi.PVCSpec{
			StorageClassName: &class,
			AccessModes:      []string{p.cfg.AccessMode},
			VolumeMode:       "Filesystem",
			Resources:        kubeapi.ResourceRequirements{Requests: map[string]string{"storage": p.cfg.Size}},
		},
	}
}

// pod is the writer: the image's own binary writing 4 KiB to the volume, with the
// chart's daemon set container's security context (root with every capability dropped,
// so that it can write in a volume's root directory owned by root).
func (p *Prober) pod(class, name string) *kubeapi.Pod {
	root, no, yes, grace := int64(0), false, true, int64(1)
	return &kubeapi.Pod{
		Metadata: p.meta(class, name),
		Spec: kubeapi.PodSpec{
			RestartPolicy:                 "Never",
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []kubeapi.Container{{
				Name:                     "writer",
				Image:                    p.cfg.Image,
				Command:                  WriterCommand,
				Args:                     WriterArgs,
				VolumeMounts:             []kubeapi.VolumeMount{{Name: "volume", MountPath: "/volume"}},
				TerminationMessagePolicy: "FallbackToLogsOnError",
				Resources: kubeapi.ResourceRequirements{
					Requests: map[string]string{"cpu": "10m", "memory": "16Mi"},
					Limits:   map[string]string{"memory": "64Mi"},
				},
				SecurityContext: &kubeapi.SecurityContext{
					RunAsUser:                &root,
					RunAsGroup:               &root,
					ReadOnlyRootFilesystem:   &yes,
					AllowPrivilegeEscalation: &no,
					Capabilities:             &kubeapi.Capabilities{Drop: []string{"ALL"}},
					SeccompProfile:           &kubeapi.SeccompProfile{Type: "RuntimeDefault"},
				},
			}},
			Volumes: []kubeapi.Volume{{Name: "volume", PersistentVolumeClaim: &kubeapi.PVCVolumeSource{ClaimName: name}}},
		},
	}
}
