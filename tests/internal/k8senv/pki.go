package k8senv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's certificate authority and the key pairs signed by it, as files in
// dir: NAME.crt and NAME.key. Go's crypto/x509 rather than openssl: no process per
// certificate and no dependency; a cluster lives for one test binary, so a day suffices.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "diskprobe-k8s-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{dir: dir, caCert: cert, caKey: key, serial: 1}
	return p, p.write("ca", der, key)
}

// issue writes NAME.crt and NAME.key: a client certificate for cn and orgs, and a serving
// one when hosts (DNS names or IP addresses) are given.
func (p *pki) issue(name, cn string, orgs []string, hosts ...string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	return p.write(name, der, key)
}

func (p *pki) write(name string, der []byte, key *ecdsa.PrivateKey) error {
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.file(name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(p.file(name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
}

func (p *pki) file(name string) string { return filepath.Join(p.dir, name) }

// kubeconfig writes a kubeconfig for the client certificate cert and key to path.
func (p *pki) kubeconfig(path, server, name, cert, key string) error {
	return writeKubeconfig(path, server, name, p.file("ca.crt"), cert, key)
}

// writeKubeconfig writes a kubeconfig for user with the client certificate cert and key,
// trusting the CA certificate ca.
func writeKubeconfig(path, server, user, ca, cert, key string) error {
	return os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, certificate-authority: %q}
users:
- name: %s
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: test
  context: {cluster: test, user: %s}
current-context: test
`, server, ca, user, cert, key, user)), 0o600)
}
