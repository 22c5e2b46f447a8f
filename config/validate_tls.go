package config

import (
	"errors"
	"io"
	"os"
	"strings"

	"github.com/quotagate/quotagate/ratelimit/redisstore"
)

// validateRedisTLS checks the TLS of a Redis at path p (store.redis.tls,
// store.global.redis.tls): its files exist, are readable
// and hold what they should (PEM certificates; a key that matches its
// certificate), the client certificate and key come together, and
// nothing is set while TLS is off.
func validateRedisTLS(errs *Errors, p string, t RedisTLS) {
	files := []struct{ field, path string }{
		{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile},
	}
	if !t.Enabled {
		for _, f := range append(files, struct{ field, path string }{"server_name", t.ServerName}) {
			if f.path != "" {
				errs.addf(p+"."+f.field, "is set but %s.enabled is false (set enabled: true, or remove it)", p)
			}
		}
		return
	}
	ok := true
	for _, f := range files {
		if f.path == "" {
			continue
		}
		if err := readable(f.path); err != nil {
			errs.addf(p+"."+f.field, "cannot be read: %v", err)
			ok = false
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		errs.add(p+".key_file", "is required with cert_file: a client certificate and its key come together")
		ok = false
	case t.CertFile == "" && t.KeyFile != "":
		errs.add(p+".cert_file", "is required with key_file: a client certificate and its key come together")
		ok = false
	}
	if !ok {
		return
	}
	if _, err := t.Files().Config(); err != nil {
		// A problem of one file goes to that file's key, so that it names
		// the variable the path came from, if any.
		path, problem := p, err.Error()
		for _, f := range files {
			if rest, ok := strings.CutPrefix(problem, f.field+": "); ok {
				path, problem = p+"."+f.field, rest
				break
			}
		}
		errs.add(path, problem)
	}
}

// readable reports why path cannot be opened and read as a regular file.
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return errors.New("it is a directory")
	}
	var b [1]byte
	if _, err := f.Read(b[:]); err == io.EOF {
		return errors.New("it is empty")
	} else if err != nil {
		return err
	}
	return nil
}

// Files is t as the store reads it.
func (t RedisTLS) Files() redisstore.TLSFiles {
	return redisstore.TLSFiles{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}
}
