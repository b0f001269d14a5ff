//go:build !linux || !(amd64 || arm64)

package netbed

import "errors"

func inNamespace(string, func() error) error {
	return errors.New("netbed: network namespaces need Linux")
}
