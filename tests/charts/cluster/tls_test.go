package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// tlsRelease installs the chart with tests/charts/testdata/webconfig-values.yaml (TLS and
// basic auth from the Secret diskprobe-web, a PodMonitor over https on the host network) on
// the first node, with a certificate for the PodMonitor's serverName and a user made here.
// Its own rules and dashboards are off: the release beside it has them.
func (e *env) tlsRelease(t *testing.T) *release {
	t.Helper()
	node := e.c.Nodes[0]
	removeAfter(t, node.Path("/var/lib/diskprobe-k8s-tls"))
	ns := "dp-tls"
	certPEM, keyPEM := serverCert(t, "diskprobe-exporter")
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	password := hex.EncodeToString(secret)
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := fmt.Sprintf("tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\nbasic_auth_users:\n  prometheus: %s\n", hash)
	data := map[string]string{"web-config.yml": webConfig, "tls.crt": string(certPEM), "tls.key": string(keyPEM),
		"ca.crt": string(certPEM), "username": "prometheus", "password": password}
	encoded := map[string]string{}
	for k, v := range data {
		encoded[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	manifest, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "diskprobe-web", "namespace": ns}, "data": encoded})
	r := &release{e: e, name: "tls", ns: ns}
	e.namespace(t, ns, "privileged")
	apply(t, e, "", string(manifest))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pods of the TLS release:\n%s", r.describe())
		}
		r.uninstall(t)
	})
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(onNode(node)+`config:
  targets:
    - name: tls
      path: /var/lib/diskprobe-k8s-tls
      fsync: {interval: 1s, ops: 5, file_size: 1MiB}
      limits: {min_free: 1MiB}
prometheusRule: {enabled: false}
dashboards: {enabled: false}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	r.notes = r.helm(t, "install", r.name, chartDir, "-n", ns, "--set", "image.tag="+e.tag,
		"-f", "../testdata/webconfig-values.yaml", "-f", values, "--wait", "--timeout", "3m")
	if !strings.Contains(r.notes, "PodMonitor tls-diskprobe-exporter") {
		t.Errorf("the TLS release's NOTES name no PodMonitor:\n%s", r.notes)
	}
	return r
}

// serverCert makes a self-signed P-256 certificate for the DNS name, valid for an hour: the
// exporter's, and the CA Prometheus trusts for it.
func serverCert(t *testing.T, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
