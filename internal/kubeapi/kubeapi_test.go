package kubeapi

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// inCluster serves h over TLS and returns the client InCluster makes of a service account
// directory for it, and that directory.
func inCluster(t *testing.T, h http.HandlerFunc) (*Client, string) {
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	writeFile(t, filepath.Join(dir, "ca.crt"), string(ca))
	writeFile(t, filepath.Join(dir, "token"), "first\n")
	host, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "https://"), ":")
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	c, namespace, err := InCluster(dir)
	if err != nil {
		t.Fatal(err)
	}
	if namespace != "" {
		t.Errorf("namespace %q without a namespace file, want none", namespace)
	}
	return c, dir
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A bound token is rotated by the kubelet: each request reads the file again.
func TestEachRequestReadsTheToken(t *testing.T) {
	var seen []string
	c, dir := inCluster(t, func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`{"metadata":{"name":"x"},"status":{"phase":"Bound"}}`))
	})
	if _, err := c.GetPVC(context.Background(), "ns", "x"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "token"), "second")
	claim, err := c.GetPVC(context.Background(), "ns", "x")
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Phase != "Bound" || strings.Join(seen, ",") != "Bearer first,Bearer second" {
		t.Errorf("phase %q, tokens sent %v", claim.Status.Phase, seen)
	}
}

// A refusal carries the API server's code and message; a delete of what is gone is not
// an error.
func TestErrorsCarryTheStatus(t *testing.T) {
	c, _ := inCluster(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","reason":"NotFound","message":"pods \"x\" not found","code":404}`))
			return
		}
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","reason":"Forbidden","message":"pods is forbidden: User \"system:serviceaccount:ns:sa\" cannot create resource \"pods\"","code":403}`))
	})
	_, err := c.CreatePod(context.Background(), "ns", &Pod{})
	var e *Error
	if !errors.As(err, &e) || e.Code != 403 || e.Reason != "Forbidden" || !strings.Contains(err.Error(), `cannot create resource "pods"`) {
		t.Errorf("create refused: %v (%#v)", err, e)
	}
	if err := c.DeletePod(context.Background(), "ns", "x"); err != nil {
		t.Errorf("delete of a pod already gone: %v", err)
	}
}

func TestInClusterNeedsTheEnvironment(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, _, err := InCluster(t.TempDir()); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("InCluster outside a pod: %v", err)
	}
}
