// compose-check loads a Compose file with compose-go, the library Docker Compose itself is built
// on: the file is validated against the Compose specification's schema, variables are
// interpolated from the env file, and the project is printed as normalized JSON. Only the env
// file is read, not the caller's environment, so the result is the same on every machine. An
// invalid file exits 1 with compose-go's message on stderr (tests/integration/test_compose.py).
//
//	compose-check docker-compose.yml .env.example
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: compose-check COMPOSE_FILE ENV_FILE")
		os.Exit(2)
	}
	file, envFile := os.Args[1], os.Args[2]
	options, err := cli.NewProjectOptions(
		[]string{file},
		cli.WithWorkingDirectory(filepath.Dir(file)),
		cli.WithEnvFiles(envFile),
		cli.WithDotEnv,
		cli.WithName("streamcore"),
	)
	if err != nil {
		fail(err)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fail(err)
	}
	out, err := project.MarshalJSON()
	if err != nil {
		fail(err)
	}
	os.Stdout.Write(out)
	fmt.Println()
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "compose-check: %v\n", err)
	os.Exit(1)
}
