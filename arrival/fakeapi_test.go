package arrival

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

// fakeAPI plays the API server's part for the prober: it keeps the PVCs and pods created,
// answers their GETs with the phases the test gives (by how many GETs came before), and
// records the deletes. A diagnostic: the real test is the cluster tier's.
type fakeAPI struct {
	mu        sync.Mutex
	pvcs      map[string]*kubeapi.PersistentVolumeClaim
	pods      map[string]*kubeapi.Pod
	gets      map[string]int
	deleted   []string // "pvc/NAME", "pod/NAME"
	created   []string
	lastPod   *kubeapi.Pod // the last pod created, as sent
	tokens    map[string]bool
	refusePVC bool // answer 403 with a Status body

	pvcPhase  func(gets int) string            // the PVC's phase at its gets-th GET
	podStatus func(gets int) kubeapi.PodStatus // the pod's status at its gets-th GET
	goneAfter int                              // GETs of a deleted PVC before it is gone
	events    []kubeapi.Event
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{
		pvcs:      map[string]*kubeapi.PersistentVolumeClaim{},
		pods:      map[string]*kubeapi.Pod{},
		gets:      map[string]int{},
		tokens:    map[string]bool{},
		pvcPhase:  func(int) string { return "Bound" },
		podStatus: func(int) kubeapi.PodStatus { return kubeapi.PodStatus{Phase: "Succeeded"} },
	}
}

// serve starts the fake over TLS and writes a service account directory for it (token,
// ca.crt, namespace), with the environment a pod has, and returns the client
// kubeapi.InCluster makes of them.
func (f *fakeAPI) serve(t *testing.T) (*kubeapi.Client, string) {
	mux := http.NewServeMux()
	const base = "/api/v1/namespaces/{ns}/"
	mux.HandleFunc("POST "+base+"persistentvolumeclaims", func(w http.ResponseWriter, r *http.Request) {
		if f.refusePVC {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"persistentvolumeclaims is forbidden: User \"system:serviceaccount:ns:arrival\" cannot create resource \"persistentvolumeclaims\"","reason":"Forbidden","code":403}`))
			return
		}
		var c kubeapi.PersistentVolumeClaim
		f.decode(t, r, &c)
		f.mu.Lock()
		f.pvcs[c.Metadata.Name] = &c
		f.created = append(f.created, "pvc/"+c.Metadata.Name)
		f.mu.Unlock()
		writeJSON(w, c)
	})
	mux.HandleFunc("POST "+base+"pods", func(w http.ResponseWriter, r *http.Request) {
		var p kubeapi.Pod
		f.decode(t, r, &p)
		f.mu.Lock()
		f.pods[p.Metadata.Name] = &p
		f.lastPod = &p
		f.created = append(f.created, "pod/"+p.Metadata.Name)
		f.mu.Unlock()
		writeJSON(w, p)
	})
	mux.HandleFunc("GET "+base+"persistentvolumeclaims/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.token(r)
		name := r.PathValue("name")
		c, ok := f.pvcs[name]
		if ok && c.Metadata.DeletionTimestamp != nil {
			f.gets["deleted/"+name]++
			if f.gets["deleted/"+name] > f.goneAfter {
				delete(f.pvcs, name)
				ok = false
			}
		}
		if !ok {
			notFound(w, "persistentvolumeclaims", name)
			return
		}
		f.gets["pvc/"+name]++
		c.Status.Phase = f.pvcPhase(f.gets["pvc/"+name])
		writeJSON(w, c)
	})
	mux.HandleFunc("GET "+base+"pods/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		name := r.PathValue("name")
		p, ok := f.pods[name]
		if !ok {
			notFound(w, "pods", name)
			return
		}
		f.gets["pod/"+name]++
		p.Status = f.podStatus(f.gets["pod/"+name])
		writeJSON(w, p)
	})
	mux.HandleFunc("DELETE "+base+"persistentvolumeclaims/{name}", func(w http.ResponseWriter, r *http.Request) {
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
	})
	mux.HandleFunc("DELETE "+base+"pods/{name}", func(w http.ResponseWriter, r *http.Request) {
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
	})
	mux.HandleFunc("GET "+base+"persistentvolumeclaims", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var items []kubeapi.PersistentVolumeClaim
		for _, c := range f.pvcs {
			if matches(r, c.Metadata) {
				items = append(items, *c)
			}
		}
		writeJSON(w, map[string]any{"items": items})
	})
	mux.HandleFunc("GET "+base+"pods", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var items []kubeapi.Pod
		for _, p := range f.pods {
			if matches(r, p.Metadata) {
				items = append(items, *p)
			}
		}
		writeJSON(w, map[string]any{"items": items})
	})
	mux.HandleFunc("GET "+base+"events", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !strings.HasPrefix(r.URL.Query().Get("fieldSelector"), "involvedObject.name=diskprobe-arrival-") {
			t.Errorf("events listed with fieldSelector %q", r.URL.Query().Get("fieldSelector"))
		}
		writeJSON(w, map[string]any{"items": f.events})
	})
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	for name, data := range map[string]string{"token": "token-1\n", "ca.crt": string(ca), "namespace": "probes\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	host, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "https://"), ":")
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	client, namespace, err := kubeapi.InCluster(dir)
	if err != nil {
		t.Fatal(err)
	}
	return client, namespace
}

func (f *fakeAPI) decode(t *testing.T, r *http.Request, v any) {
	f.mu.Lock()
	f.token(r)
	f.mu.Unlock()
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		t.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
	}
}

func (f *fakeAPI) token(r *http.Request) { f.tokens[r.Header.Get("Authorization")] = true }

// matches is the label selector the prober lists with: component=arrival and the class
// label present.
func matches(r *http.Request, m kubeapi.ObjectMeta) bool {
	if r.URL.Query().Get("labelSelector") != leftoverSelector {
		return false
	}
	_, hasClass := m.Labels[ClassLabel]
	return m.Labels[ComponentLabel] == Component && hasClass
}

func (f *fakeAPI) deletes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deleted...)
}

func (f *fakeAPI) remaining() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pvcs) + len(f.pods)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter, resource, name string) {
	w.WriteHeader(http.StatusNotFound)
	writeJSON(w, map[string]any{"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
		"message": resource + ` "` + name + `" not found`})
}
