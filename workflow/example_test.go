package workflow_test

import (
	"fmt"
	"strings"

	"github.com/weftrun/weft/workflow"
)

// Templates are YAML; every problem is reported with the file and the line.
func ExampleParse() {
	_, err := workflow.Parse("checkout.yaml", []byte(`namespace: shop
name: checkout
version: 1.0.0
steps:
  - name: charge
    handler: shop.charge
    depends_on: [validate]
    retrys: 3
`))
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Println(line)
	}
	// Output:
	// checkout.yaml:8: step "charge": unknown key "retrys"
	// checkout.yaml:5: step "charge": depends_on: depends on unknown step "validate"
}
