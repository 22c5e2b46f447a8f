package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles names what a TLS connection to Redis trusts and presents,
// as PEM files.
type TLSFiles struct {
	// CAFile holds the certificates that may sign the server's
	// certificate; "" trusts the system's roots.
	CAFile string
	// CertFile and KeyFile are the client's certificate (chain) and key,
	// for servers that authenticate clients (tls-auth-clients); both or
	// neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry; ""
	// means the host of each address dialled.
	ServerName string
}

// Config reads the files and returns the client configuration: TLS 1.2
// or later, the server's certificate verified against CAFile (or the
// system's roots) and ServerName. An unreadable file, a file that holds no
// certificate, or a key that does not match its certificate is an error
// naming the file.
func (f TLSFiles) Config() (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file: %s holds no PEM certificate", f.CAFile)
		}
		conf.RootCAs = pool
	}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file, key_file: %w", err)
		}
		conf.Certificates = []tls.Certificate{pair}
	case f.CertFile != "" || f.KeyFile != "":
		return nil, errors.New("cert_file and key_file: give both or neither")
	}
	return conf, nil
}
