package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/diskprobe/diskprobe_exporter/tests/framework"
)

// TestTLSAndBasicAuthEndToEnd serves the exporter with exporter-toolkit's web config: a
// certificate made here, and one user with a bcrypt password. A real TLS client that
// trusts only that certificate gets 401 without credentials or with a wrong password, 200
// with the right ones; a client that does not trust it fails the handshake; plain HTTP
// gets no metrics; and a reload without credentials is refused.
func TestTLSAndBasicAuthEndToEnd(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM := selfSignedCert(t)
	must(t, os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "key.pem"), keyPEM, 0o600))
	secret := make([]byte, 16)
	rand.Read(secret)
	password := hex.EncodeToString(secret)
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	must(t, err)
	webConfig := filepath.Join(dir, "web.yml")
	must(t, os.WriteFile(webConfig, []byte(fmt.Sprintf(`tls_server_config:
  cert_file: cert.pem
  key_file: key.pem
basic_auth_users:
  prometheus: %s
`, hash)), 0o600))

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	get := func(method, url, user, pass string) (int, string, error) {
		req, _ := http.NewRequest(method, url, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}

	data := t.TempDir()
	cfg := framework.WriteConfig(t, fmt.Sprintf(`targets:
  - name: quiet
    path: %s
    fsync: {interval: 1s, ops: 1, block_size: 4KiB, file_size: 1MiB}
    limits: {min_free: 0}
`, data))
	e := framework.StartExporterWith(t, cfg, framework.ExporterOptions{
		Args: []string{"--web.config.file=" + webConfig},
		Ready: func(addr string) bool {
			code, _, err := get("GET", "https://"+addr+"/-/ready", "prometheus", password)
			return err == nil && code == http.StatusOK
		},
	})
	base := "https://" + e.Addr

	if code, _, err := get("GET", base+"/metrics", "", ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("TLS scrape without credentials: %d %v; want 401", code, err)
	}
	if code, _, err := get("GET", base+"/metrics", "prometheus", password+"x"); err != nil || code != http.StatusUnauthorized {
		t.Errorf("TLS scrape with a wrong password: %d %v; want 401", code, err)
	}
	if code, _, err := get("POST", base+"/-/reload", "", ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("reload without credentials: %d %v; want 401", code, err)
	}
	code, body, err := get("GET", base+"/metrics", "prometheus", password)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "diskprobe_exporter_build_info") {
		t.Errorf("TLS scrape with credentials: %d %v; want 200 with metrics", code, err)
	}

	// A client that does not trust the certificate: the handshake fails.
	untrusting := &http.Client{Timeout: 10 * time.Second}
	if resp, err := untrusting.Get(base + "/metrics"); err == nil {
		resp.Body.Close()
		t.Errorf("a client without the certificate got %d; want a failed handshake", resp.StatusCode)
	}

	// Plain HTTP on the TLS port: no metrics.
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + e.Addr + "/metrics")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("plain HTTP: %d %q", resp.StatusCode, strings.TrimSpace(string(b)))
		if resp.StatusCode == http.StatusOK || strings.Contains(string(b), "diskprobe_") {
			t.Errorf("plain HTTP served: %d", resp.StatusCode)
		}
	} else {
		t.Logf("plain HTTP: %v", err)
	}
}

// selfSignedCert makes a P-256 certificate for 127.0.0.1, valid for an hour.
func selfSignedCert(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "diskprobe_exporter test"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
