package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSFiles are PEM files of a test certificate authority and of a server
// and a client certificate it signed, as redis-server and a client read
// them. The server certificate names 127.0.0.1 and "localhost"; the
// client certificate is for client authentication. Keys are ECDSA P-256,
// unencrypted. Every certificate is valid from an hour ago for a day.
type TLSFiles struct {
	CA                    string // the CA's certificate
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	OtherCA               string // a second CA that signed nothing here

	tb                  testing.TB
	dir                 string
	notBefore, notAfter time.Time
	caCert              *x509.Certificate
	caKey               *ecdsa.PrivateKey
	caPool              *x509.CertPool
	clientPair          tls.Certificate
	serial              int64
}

// NewTLSFiles writes a fresh CA, server and client certificate into a
// temporary directory of tb.
func NewTLSFiles(tb testing.TB) *TLSFiles {
	tb.Helper()
	now := time.Now()
	f := &TLSFiles{dir: tb.TempDir(), notBefore: now.Add(-time.Hour), notAfter: now.Add(24 * time.Hour),
		tb: tb}
	var caPEM []byte
	f.caCert, f.caKey, caPEM = f.newCA("quotagate test CA")
	f.CA = f.write("ca.pem", caPEM)
	_, _, otherPEM := f.newCA("quotagate other CA")
	f.OtherCA = f.write("other-ca.pem", otherPEM)
	f.caPool = x509.NewCertPool()
	f.caPool.AddCert(f.caCert)

	certPEM, keyPEM := f.leaf("127.0.0.1", x509.ExtKeyUsageServerAuth)
	f.ServerCert, f.ServerKey = f.write("server.pem", certPEM), f.write("server-key.pem", keyPEM)
	certPEM, keyPEM = f.leaf("quotagate client", x509.ExtKeyUsageClientAuth)
	f.ClientCert, f.ClientKey = f.write("client.pem", certPEM), f.write("client-key.pem", keyPEM)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		tb.Fatalf("redistest: client key pair: %v", err)
	}
	f.clientPair = pair
	return f
}

// ClientConfig is the TLS configuration the harness uses to reach a
// server that presents f's server certificate.
func (f *TLSFiles) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: f.caPool, Certificates: []tls.Certificate{f.clientPair},
		ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

func (f *TLSFiles) newCA(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	key := f.key()
	tmpl := &x509.Certificate{
		SerialNumber:          f.nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             f.notBefore,
		NotAfter:              f.notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		f.tb.Fatalf("redistest: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		f.tb.Fatalf("redistest: CA certificate: %v", err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// leaf returns a certificate signed by the CA and its key, both PEM. A
// server certificate names 127.0.0.1 and localhost.
func (f *TLSFiles) leaf(name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	key := f.key()
	tmpl := &x509.Certificate{
		SerialNumber: f.nextSerial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    f.notBefore,
		NotAfter:     f.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.caCert, &key.PublicKey, f.caKey)
	if err != nil {
		f.tb.Fatalf("redistest: certificate %s: %v", name, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		f.tb.Fatalf("redistest: key %s: %v", name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func (f *TLSFiles) key() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.tb.Fatalf("redistest: key: %v", err)
	}
	return k
}

func (f *TLSFiles) nextSerial() *big.Int {
	f.serial++
	return big.NewInt(f.serial)
}

func (f *TLSFiles) write(name string, data []byte) string {
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		f.tb.Fatalf("redistest: %v", err)
	}
	return p
}
