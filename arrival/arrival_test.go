package arrival

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/diskprobe/diskprobe_exporter/internal/kubeapi"
	"github.com/diskprobe/diskprobe_exporter/internal/kubeapi/kubeapitest"
)

const class = "fast-local"

// syncBuffer is a log both the test and the prober's goroutines use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newProber is a prober of class against f, polling every 10 ms, each stage bounded by
// timeout.
func newProber(t *testing.T, f *kubeapitest.Fake, timeout time.Duration) (*Prober, *syncBuffer) {
	t.Helper()
	client := f.Client(t, f.Serve(t))
	var log syncBuffer
	p, err := New(client, Config{
		Classes:    []string{class},
		Interval:   time.Hour,
		Timeout:    timeout,
		Size:       "1Gi",
		AccessMode: "ReadWriteOnce",
		Namespace:  kubeapitest.Namespace,
		Image:      "diskprobe/diskprobe_exporter:test",
		Owner:      &kubeapi.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "arrival-0", UID: "owner-uid"},
		Poll:       10 * time.Millisecond,
	}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return p, &log
}

func (p *Prober) observations(stage string) uint64 {
	m := &dto.Metric{}
	_ = p.metrics.seconds.WithLabelValues(class, stage).(prometheus.Metric).Write(m)
	return m.GetHistogram().GetSampleCount()
}

func (p *Prober) failuresAt(stage string) float64 {
	return testutil.ToFloat64(p.metrics.failures.WithLabelValues(class, stage))
}

// The success path: four observations, no failure, a last-success time, both objects
// deleted, the pod as the contract says.
func TestAttemptObservesEveryStage(t *testing.T) {
	f := kubeapitest.New()
	f.PVCPhase = func(gets int) string { return map[bool]string{true: "Bound", false: "Pending"}[gets > 2] }
	f.PodStatus = func(gets int) kubeapi.PodStatus {
		switch {
		case gets < 2:
			return kubeapi.PodStatus{Phase: "Pending"}
		case gets < 4:
			return kubeapi.PodStatus{Phase: "Running"}
		}
		return kubeapi.PodStatus{Phase: "Succeeded"}
	}
	f.GoneAfter = 2
	p, log := newProber(t, f, 10*time.Second)
	p.attempt(context.Background(), class)

	for _, stage := range timedStages {
		if n := p.observations(stage); n != 1 {
			t.Errorf("stage %s observed %d times, want 1", stage, n)
		}
	}
	for _, stage := range allStages {
		if n := p.failuresAt(stage); n != 0 {
			t.Errorf("failures at %s: %v, want 0; log:\n%s", stage, n, log)
		}
	}
	if v := testutil.ToFloat64(p.metrics.attempts.WithLabelValues(class)); v != 1 {
		t.Errorf("attempts %v, want 1", v)
	}
	if v := testutil.ToFloat64(p.metrics.lastSuccess.WithLabelValues(class)); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last success %v, want about now", v)
	}
	if f.Remaining() != 0 {
		t.Errorf("%d objects left after the attempt", f.Remaining())
	}
	if !f.SawToken(kubeapitest.Token) {
		t.Error("no request carried the service account's token")
	}

	pod := f.LastPod()
	name := pod.Metadata.Name
	if !strings.HasPrefix(name, "diskprobe-arrival-fast-local-") || len(name) != len("diskprobe-arrival-fast-local-")+5 {
		t.Errorf("object name %q", name)
	}
	if created := f.Created(); !slices.Equal(created, []string{"pvc/" + name, "pod/" + name}) {
		t.Errorf("created %v", created)
	}
	c := pod.Spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case pod.Spec.RestartPolicy != "Never", *pod.Spec.AutomountServiceAccountToken, *pod.Spec.TerminationGracePeriodSeconds != 1:
		t.Errorf("pod spec %+v", pod.Spec)
	case !slices.Equal(append(c.Command, c.Args...), []string{"/bin/diskprobe_exporter", "arrival-write", "/volume"}):
		t.Errorf("writer runs %v %v", c.Command, c.Args)
	case *sc.RunAsUser != 0, !*sc.ReadOnlyRootFilesystem, *sc.AllowPrivilegeEscalation, !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}), sc.SeccompProfile.Type != "RuntimeDefault":
		t.Errorf("security context %+v", sc)
	case pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != name, c.VolumeMounts[0].MountPath != "/volume":
		t.Errorf("volume %+v mounted %+v", pod.Spec.Volumes, c.VolumeMounts)
	case pod.Metadata.Labels[ComponentLabel] != "arrival", pod.Metadata.Labels[ClassLabel] != class:
		t.Errorf("labels %v", pod.Metadata.Labels)
	case !pod.Metadata.OwnedBy("owner-uid"):
		t.Errorf("owner references %v", pod.Metadata.OwnerReferences)
	}
}

// A PVC that never binds: a failure at bound, its last event in the log, both deleted.
func TestAttemptPVCNeverBound(t *testing.T) {
	f := kubeapitest.New()
	f.PVCPhase = func(int) string { return "Pending" }
	f.PodStatus = func(int) kubeapi.PodStatus { return kubeapi.PodStatus{Phase: "Pending"} }
	older, newer := time.Now().Add(-time.Minute), time.Now()
	f.Events = []kubeapi.Event{
		{Type: "Warning", Reason: "ProvisioningFailed", Message: "storageclass.storage.k8s.io \"fast-local\" not found", LastTimestamp: &newer},
		{Type: "Normal", Reason: "WaitForFirstConsumer", Message: "waiting for first consumer", LastTimestamp: &older},
	}
	p, log := newProber(t, f, 200*time.Millisecond)
	p.attempt(context.Background(), class)

	if n := p.failuresAt(StageBound); n != 1 {
		t.Errorf("failures at bound: %v, want 1", n)
	}
	if n := p.observations(StageBound); n != 0 {
		t.Errorf("bound observed %d times, want 0", n)
	}
	name := f.LastPod().Metadata.Name
	if d := f.Deletes(); !slices.Contains(d, "pvc/"+name) || !slices.Contains(d, "pod/"+name) {
		t.Errorf("deleted %v, want the PVC and the pod", d)
	}
	for _, want := range []string{"stage=bound", "storage_class=" + class, "ProvisioningFailed", "not found", "PVC Pending"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, log)
		}
	}
	if strings.Count(log.String(), "attempt failed") != 1 {
		t.Errorf("want one line for the failure:\n%s", log)
	}
}

// The writer fails: running observed, a failure at written with its message.
func TestAttemptPodFailed(t *testing.T) {
	f := kubeapitest.New()
	f.PodStatus = func(int) kubeapi.PodStatus {
		return kubeapi.PodStatus{Phase: "Failed", ContainerStatuses: []kubeapi.ContainerStatus{{Name: "writer", State: kubeapi.ContainerState{
			Terminated: &kubeapi.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "arrival-write: create /volume/.diskprobe-arrival: read-only file system"},
		}}}}
	}
	p, log := newProber(t, f, 5*time.Second)
	p.attempt(context.Background(), class)

	if n := p.failuresAt(StageWritten); n != 1 {
		t.Errorf("failures at written: %v, want 1; log:\n%s", n, log)
	}
	if n := p.observations(StageRunning); n != 1 {
		t.Errorf("running observed %d times, want 1", n)
	}
	if n := p.observations(StageWritten); n != 0 {
		t.Errorf("written observed %d times, want 0", n)
	}
	for _, want := range []string{"stage=written", "exited 1", "read-only file system"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, log)
		}
	}
	name := f.LastPod().Metadata.Name
	if d := f.Deletes(); !slices.Contains(d, "pvc/"+name) || !slices.Contains(d, "pod/"+name) {
		t.Errorf("deleted %v, want the PVC and the pod", d)
	}
}

// A create the API server refuses: a failure at create with its message, nothing deleted
// (nothing was made).
func TestAttemptCreateRefused(t *testing.T) {
	f := kubeapitest.New()
	f.RefusePVC = true
	p, log := newProber(t, f, 5*time.Second)
	p.attempt(context.Background(), class)

	if n := p.failuresAt(StageCreate); n != 1 {
		t.Errorf("failures at create: %v, want 1", n)
	}
	for _, want := range []string{"stage=create", "403", "cannot create resource", "persistentvolumeclaims is forbidden"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, log)
		}
	}
	if d, c := f.Deletes(), f.Created(); len(d) != 0 || len(c) != 0 {
		t.Errorf("created %v, deleted %v; want nothing", c, d)
	}
}

// SIGTERM mid-attempt: both objects deleted, no failure counted, Run returns.
func TestCancelDeletesTheAttemptsObjects(t *testing.T) {
	f := kubeapitest.New()
	f.PVCPhase = func(int) string { return "Pending" }
	p, log := newProber(t, f, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		p.Run(ctx)
		close(done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if pod := f.LastPod(); pod != nil && f.Gets("pvc/"+pod.Metadata.Name) > 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no attempt waiting for its PVC")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if f.Remaining() != 1 || len(f.Deletes()) != 2 { // the PVC is marked deleted, as a real one with its finalizer
		t.Errorf("after cancel: deleted %v, %d objects left", f.Deletes(), f.Remaining())
	}
	for _, stage := range allStages {
		if n := p.failuresAt(stage); n != 0 {
			t.Errorf("failures at %s: %v, want 0 for an interrupted attempt", stage, n)
		}
	}
	if !strings.Contains(log.String(), "interrupted") {
		t.Errorf("log does not say the attempt was interrupted:\n%s", log)
	}
}

// At start, the objects a crashed run left (ours: owned by this pod or by none) are
// deleted; another owner's are not.
func TestRunDeletesLeftovers(t *testing.T) {
	f := kubeapitest.New()
	labels := map[string]string{ComponentLabel: Component, ClassLabel: class}
	other := []kubeapi.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "other", UID: "other-uid"}}
	mine := []kubeapi.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "arrival-0", UID: "owner-uid"}}
	f.AddPVC(kubeapi.PersistentVolumeClaim{Metadata: kubeapi.ObjectMeta{Name: "diskprobe-arrival-fast-local-aaaaa", Labels: labels, OwnerReferences: mine}})
	f.AddPod(kubeapi.Pod{Metadata: kubeapi.ObjectMeta{Name: "diskprobe-arrival-fast-local-aaaaa", Labels: labels}})
	f.AddPVC(kubeapi.PersistentVolumeClaim{Metadata: kubeapi.ObjectMeta{Name: "diskprobe-arrival-fast-local-bbbbb", Labels: labels, OwnerReferences: other}})
	f.AddPVC(kubeapi.PersistentVolumeClaim{Metadata: kubeapi.ObjectMeta{Name: "somebody-elses", Labels: map[string]string{ComponentLabel: Component}}})
	p, _ := newProber(t, f, time.Minute)
	p.deleteLeftovers(context.Background())

	got := f.Deletes()
	slices.Sort(got)
	want := []string{"pod/diskprobe-arrival-fast-local-aaaaa", "pvc/diskprobe-arrival-fast-local-aaaaa"}
	if !slices.Equal(got, want) {
		t.Errorf("deleted %v, want %v", got, want)
	}
}

// Every class's series exist from the start, at 0.
func TestSeriesExistFromStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(nil, Config{Classes: []string{"a", "b"}}, reg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{secondsName: 2 * 4, attemptsName: 2, failuresName: 2 * 5, lastSuccessName: 2}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if n := len(mf.GetMetric()); n != want[mf.GetName()] {
			t.Errorf("%s: %d series, want %d", mf.GetName(), n, want[mf.GetName()])
		}
		delete(want, mf.GetName())
	}
	if len(want) != 0 {
		t.Errorf("not registered: %v", want)
	}
}

func TestObjectName(t *testing.T) {
	for class, prefix := range map[string]string{
		"fast-local":            "diskprobe-arrival-fast-local-",
		"Ceph.RBD_ssd":          "diskprobe-arrival-ceph-rbd-ssd-",
		strings.Repeat("x", 80): "diskprobe-arrival-" + strings.Repeat("x", 39) + "-",
		"...":                   "diskprobe-arrival-class-",
	} {
		name := ObjectName(class)
		if !strings.HasPrefix(name, prefix) || len(name) != len(prefix)+5 || len(name) > 63 {
			t.Errorf("ObjectName(%q) = %q, want %s + 5 characters, at most 63", class, name, prefix)
		}
	}
}
