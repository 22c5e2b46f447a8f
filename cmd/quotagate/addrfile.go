package main

import (
	"encoding/json"
	"net"
	"os"
)

// boundAddrs is the content of the -addr-file: the addresses the listeners
// bound, as host:port, with the real port where the config said 0.
type boundAddrs struct {
	Listen      string `json:"listen"`
	AdminListen string `json:"admin_listen"`
}

// writeAddrFile writes the bound addresses of pub and admin to path as one
// JSON object. It writes a temporary file beside path and renames it, so a
// reader polling path sees either no file or the whole object.
func writeAddrFile(path string, pub, admin net.Addr) error {
	b, err := json.Marshal(boundAddrs{Listen: pub.String(), AdminListen: admin.String()})
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
