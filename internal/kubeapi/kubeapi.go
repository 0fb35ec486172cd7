// Package kubeapi is a minimal in-cluster Kubernetes API client: the few core/v1 calls
// the arrival prober makes (PersistentVolumeClaims, Pods, Events in one namespace), on
// net/http and encoding/json, so that the daemon's module carries no client-go.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ServiceAccountDir is where Kubernetes mounts a pod's service account credentials.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// requestTimeout bounds one API request; the prober's waits are many short requests.
const requestTimeout = 30 * time.Second

// Client calls one API server with a service account's token.
type Client struct {
	base      string // https://host:port
	tokenFile string
	http      *http.Client
}

// InCluster returns a client configured as client-go's rest.InClusterConfig does: the
// API server from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the token and CA
// from dir (ServiceAccountDir in a pod), and the pod's namespace from dir/namespace.
func InCluster(dir string) (*Client, string, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, "", errors.New("not in a Kubernetes pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set")
	}
	tokenFile := filepath.Join(dir, "token")
	if _, err := os.Stat(tokenFile); err != nil {
		return nil, "", fmt.Errorf("service account token: %w", err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, "", fmt.Errorf("service account CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, "", fmt.Errorf("service account CA %s: no PEM certificate", caFile)
	}
	namespace := ""
	if b, err := os.ReadFile(filepath.Join(dir, "namespace")); err == nil {
		namespace = strings.TrimSpace(string(b))
	}
	// HTTPS_PROXY and NO_PROXY are honoured, as client-go does.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &Client{
		base:      "https://" + net.JoinHostPort(host, port),
		tokenFile: tokenFile,
		http:      &http.Client{Transport: transport, Timeout: requestTimeout},
	}, namespace, nil
}

// Error is the API server's answer to a request it refused: its HTTP code and, from its
// Status body, the reason and message (`persistentvolumeclaims is forbidden: …`).
type Error struct {
	Code    int
	Reason  string
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("API server answered %d %s", e.Code, http.StatusText(e.Code))
	}
	return fmt.Sprintf("API server answered %d: %s", e.Code, e.Message)
}

// IsNotFound reports whether err is the API server's 404.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == http.StatusNotFound
}

// do sends one request and decodes a 2xx answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	var reqBody io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reqBody = bytes.NewReader(b)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, reqBody)
	if err != nil {
		return err
	}
	// Read on every request: a projected (bound) token is rotated by the kubelet.
	token, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return fmt.Errorf("service account token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "diskprobe_exporter-arrival")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err // a *url.Error, which names the method and the URL
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Code: resp.StatusCode}
		var status struct{ Reason, Message string }
		if json.Unmarshal(data, &status) == nil {
			e.Reason, e.Message = status.Reason, status.Message
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

func namespaced(namespace, resource string) string {
	return "/api/v1/namespaces/" + url.PathEscape(namespace) + "/" + resource
}

func labelQuery(selector string) url.Values {
	return url.Values{"labelSelector": {selector}}
}

// CreatePVC creates claim in namespace and returns what the API server stored.
func (c *Client) CreatePVC(ctx context.Context, namespace string, claim *PersistentVolumeClaim) (*PersistentVolumeClaim, error) {
	claim.APIVersion, claim.Kind = "v1", "PersistentVolumeClaim"
	out := &PersistentVolumeClaim{}
	return out, c.do(ctx, http.MethodPost, namespaced(namespace, "persistentvolumeclaims"), nil, claim, out)
}

// GetPVC reads the claim name in namespace.
func (c *Client) GetPVC(ctx context.Context, namespace, name string) (*PersistentVolumeClaim, error) {
	out := &PersistentVolumeClaim{}
	return out, c.do(ctx, http.MethodGet, namespaced(namespace, "persistentvolumeclaims/"+url.PathEscape(name)), nil, nil, out)
}

// ListPVCs lists the claims in namespace that match a label selector.
func (c *Client) ListPVCs(ctx context.Context, namespace, labelSelector string) ([]PersistentVolumeClaim, error) {
	var out struct{ Items []PersistentVolumeClaim }
	return out.Items, c.do(ctx, http.MethodGet, namespaced(namespace, "persistentvolumeclaims"), labelQuery(labelSelector), nil, &out)
}

// DeletePVC deletes the claim name in namespace; one already gone is not an error.
func (c *Client) DeletePVC(ctx context.Context, namespace, name string) error {
	return ignoreNotFound(c.do(ctx, http.MethodDelete, namespaced(namespace, "persistentvolumeclaims/"+url.PathEscape(name)), nil, backgroundDelete, nil))
}

// CreatePod creates pod in namespace and returns what the API server stored.
func (c *Client) CreatePod(ctx context.Context, namespace string, pod *Pod) (*Pod, error) {
	pod.APIVersion, pod.Kind = "v1", "Pod"
	out := &Pod{}
	return out, c.do(ctx, http.MethodPost, namespaced(namespace, "pods"), nil, pod, out)
}

// GetPod reads the pod name in namespace.
func (c *Client) GetPod(ctx context.Context, namespace, name string) (*Pod, error) {
	out := &Pod{}
	return out, c.do(ctx, http.MethodGet, namespaced(namespace, "pods/"+url.PathEscape(name)), nil, nil, out)
}

// ListPods lists the pods in namespace that match a label selector.
func (c *Client) ListPods(ctx context.Context, namespace, labelSelector string) ([]Pod, error) {
	var out struct{ Items []Pod }
	return out.Items, c.do(ctx, http.MethodGet, namespaced(namespace, "pods"), labelQuery(labelSelector), nil, &out)
}

// DeletePod deletes the pod name in namespace; one already gone is not an error.
func (c *Client) DeletePod(ctx context.Context, namespace, name string) error {
	return ignoreNotFound(c.do(ctx, http.MethodDelete, namespaced(namespace, "pods/"+url.PathEscape(name)), nil, backgroundDelete, nil))
}

// ListEvents lists the events in namespace about the object name (of any kind).
func (c *Client) ListEvents(ctx context.Context, namespace, name string) ([]Event, error) {
	var out struct{ Items []Event }
	q := url.Values{"fieldSelector": {"involvedObject.name=" + name}}
	return out.Items, c.do(ctx, http.MethodGet, namespaced(namespace, "events"), q, nil, &out)
}

// backgroundDelete is the delete options of every delete: return at once, dependents
// collected in the background.
var backgroundDelete = map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}

func ignoreNotFound(err error) error {
	if IsNotFound(err) {
		return nil
	}
	return err
}
