// Package kubeapitest plays the Kubernetes API server's part for the arrival prober's
// tests, over TLS, reached through kubeapi.InCluster: the PVCs and pods created, their
// phases as a test scripts them, the deletes. A diagnostic: the real test is the
// cluster tier's.
package kubeapitest

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diskprobe/diskprobe_exporter/internal/kubeapi"
)

// Namespace is the namespace the fake's service account directory names.
const Namespace = "probes"

// Token is the service account token the fake's directory holds.
const Token = "token-1"

// Fake is an API server of PVCs, pods and events. Set its behaviour before Serve.
type Fake struct {
	RefusePVC bool                             // answer a PVC create 403, with a Status body
	PVCPhase  func(gets int) string            // a PVC's phase at its gets-th GET (default Bound)
	PodStatus func(gets int) kubeapi.PodStatus // a pod's status at its gets-th GET (default Succeeded)
	GoneAfter int                              // GETs of a deleted PVC before it is gone
	Events    []kubeapi.Event                  // the answer to every events list

	mu      sync.Mutex
	pvcs    map[string]*kubeapi.PersistentVolumeClaim
	pods    map[string]*kubeapi.Pod
	gets    map[string]int
	deleted []string // "pvc/NAME", "pod/NAME"
	created []string
	lastPod *kubeapi.Pod
	tokens  map[string]bool
	t       testing.TB
}

// New is a Fake whose PVCs bind and whose pods succeed at once.
func New() *Fake {
	return &Fake{
		PVCPhase:  func(int) string { return "Bound" },
		PodStatus: func(int) kubeapi.PodStatus { return kubeapi.PodStatus{Phase: "Succeeded"} },
		pvcs:      map[string]*kubeapi.PersistentVolumeClaim{},
		pods:      map[string]*kubeapi.Pod{},
		gets:      map[string]int{},
		tokens:    map[string]bool{},
	}
}

// Serve starts the fake and writes a service account directory for it (token, ca.crt,
// namespace), sets the environment a pod has (KUBERNETES_SERVICE_HOST and _PORT), and
// returns the directory.
func (f *Fake) Serve(t testing.TB) string {
	f.t = t
	mux := http.NewServeMux()
	const base = "/api/v1/namespaces/{ns}/"
	mux.HandleFunc("POST "+base+"persistentvolumeclaims", f.createPVC)
	mux.HandleFunc("POST "+base+"pods", f.createPod)
	mux.HandleFunc("GET "+base+"persistentvolumeclaims/{name}", f.getPVC)
	mux.HandleFunc("GET "+base+"pods/{name}", f.getPod)
	mux.HandleFunc("DELETE "+base+"persistentvolumeclaims/{name}", f.deletePVC)
	mux.HandleFunc("DELETE "+base+"pods/{name}", f.deletePod)
	mux.HandleFunc("GET "+base+"persistentvolumeclaims", f.listPVCs)
	mux.HandleFunc("GET "+base+"pods", f.listPods)
	mux.HandleFunc("GET "+base+"events", f.listEvents)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.tokens[r.Header.Get("Authorization")] = true
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	for name, data := range map[string]string{"token": Token + "\n", "ca.crt": string(ca), "namespace": Namespace + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	host, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "https://"), ":")
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	return dir
}

// Client is kubeapi.InCluster's client of a served fake's directory.
func (f *Fake) Client(t testing.TB, dir string) *kubeapi.Client {
	c, namespace, err := kubeapi.InCluster(dir)
	if err != nil {
		t.Fatal(err)
	}
	if namespace != Namespace {
		t.Fatalf("namespace %q from the service account's file, want %s", namespace, Namespace)
	}
	return c
}

func (f *Fake) createPVC(w http.ResponseWriter, r *http.Request) {
	if f.RefusePVC {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"persistentvolumeclaims is forbidden: User \"system:serviceaccount:probes:arrival\" cannot create resource \"persistentvolumeclaims\" in API group \"\" in the namespace \"probes\"","reason":"Forbidden","code":403}`))
		return
	}
	var c kubeapi.PersistentVolumeClaim
	if !f.decode(w, r, &c) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pvcs[c.Metadata.Name] = &c
	f.created = append(f.created, "pvc/"+c.Metadata.Name)
	writeJSON(w, c)
}

func (f *Fake) createPod(w http.ResponseWriter, r *http.Request) {
	var p kubeapi.Pod
	if !f.decode(w, r, &p) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[p.Metadata.Name] = &p
	f.lastPod = &p
	f.created = append(f.created, "pod/"+p.Metadata.Name)
	writeJSON(w, p)
}

func (f *Fake) getPVC(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("name")
	c, ok := f.pvcs[name]
	if ok && c.Metadata.DeletionTimestamp != nil {
		f.gets["deleted/"+name]++
		if f.gets["deleted/"+name] > f.GoneAfter {
			delete(f.pvcs, name)
			ok = false
		}
	}
	if !ok {
		notFound(w, "persistentvolumeclaims", name)
		return
	}
	f.gets["pvc/"+name]++
	c.Status.Phase = f.PVCPhase(f.gets["pvc/"+name])
	writeJSON(w, c)
}

func (f *Fake) getPod(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("name")
	p, ok := f.pods[name]
	if !ok {
		notFound(w, "pods", name)
		return
	}
	f.gets["pod/"+name]++
	p.Status = f.PodStatus(f.gets["pod/"+name])
	writeJSON(w, p)
}

// deletePVC marks the PVC deleted, as the API server does for a PVC with its
// protection finalizer; it is gone after GoneAfter more GETs.
func (f *Fake) deletePVC(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("name")
	c, ok := f.pvcs[name]
	if !ok {
		notFound(w, "persistentvolumeclaims", name)
		return
	}
	f.deleted = append(f.deleted, "pvc/"+name)
	if c.Metadata.DeletionTimestamp == nil {
		now := time.Now()
		c.Metadata.DeletionTimestamp = &now
	}
	writeJSON(w, c)
}

func (f *Fake) deletePod(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("name")
	if _, ok := f.pods[name]; !ok {
		notFound(w, "pods", name)
		return
	}
	delete(f.pods, name)
	f.deleted = append(f.deleted, "pod/"+name)
	writeJSON(w, map[string]string{"kind": "Status", "status": "Success"})
}

func (f *Fake) listPVCs(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	items := []kubeapi.PersistentVolumeClaim{}
	for _, c := range f.pvcs {
		if selects(r.URL.Query().Get("labelSelector"), c.Metadata.Labels) {
			items = append(items, *c)
		}
	}
	writeJSON(w, map[string]any{"items": items})
}

func (f *Fake) listPods(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	items := []kubeapi.Pod{}
	for _, p := range f.pods {
		if selects(r.URL.Query().Get("labelSelector"), p.Metadata.Labels) {
			items = append(items, *p)
		}
	}
	writeJSON(w, map[string]any{"items": items})
}

func (f *Fake) listEvents(w http.ResponseWriter, r *http.Request) {
	if sel := r.URL.Query().Get("fieldSelector"); !strings.HasPrefix(sel, "involvedObject.name=") {
		f.t.Errorf("events listed with fieldSelector %q, want involvedObject.name=…", sel)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	writeJSON(w, map[string]any{"items": f.Events})
}

// selects is a label selector of equalities (k=v) and existences (k), comma-separated.
func selects(selector string, labels map[string]string) bool {
	for term := range strings.SplitSeq(selector, ",") {
		k, v, eq := strings.Cut(term, "=")
		got, ok := labels[k]
		if !ok || (eq && got != v) {
			return false
		}
	}
	return true
}

func (f *Fake) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		f.t.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// AddPVC puts a PVC in the fake, as a crashed run would have left it.
func (f *Fake) AddPVC(c kubeapi.PersistentVolumeClaim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pvcs[c.Metadata.Name] = &c
}

// AddPod puts a pod in the fake, as a crashed run would have left it.
func (f *Fake) AddPod(p kubeapi.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[p.Metadata.Name] = &p
}

// Deletes are the delete calls answered, "pvc/NAME" and "pod/NAME", in order.
func (f *Fake) Deletes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deleted...)
}

// Created are the objects created, "pvc/NAME" and "pod/NAME", in order.
func (f *Fake) Created() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.created...)
}

// Remaining is how many PVCs and pods the fake holds (a deleted PVC until it is gone).
func (f *Fake) Remaining() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pvcs) + len(f.pods)
}

// LastPod is the last pod created, as sent.
func (f *Fake) LastPod() *kubeapi.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastPod
}

// Gets is how many GETs the object ("pvc/NAME", "pod/NAME") has had.
func (f *Fake) Gets(object string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets[object]
}

// SawToken reports whether a request carried the token.
func (f *Fake) SawToken(token string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens["Bearer "+token]
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter, resource, name string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
		"message": resource + ` "` + name + `" not found`})
}
