// The page tests/editor/test_forms.py drives: forms.js alone, on the schema `llm-fsm schema` prints, with every
// onChange and onRename call recorded for the test to read.
"use strict";

window.harness = {
  schema: null,
  changes: [],
  renames: [],
  handle: null,
  render(type, value, extra) {
    const more = Object.assign({}, extra || {});
    const renames = more.rename;
    delete more.rename;
    this.changes = [];
    this.renames = [];
    const options = Object.assign(
      { schema: this.schema, type, value, onChange: (changed) => this.changes.push(changed) },
      renames ? { onRename: (id) => this.renames.push(id) } : {},
      more,
    );
    this.handle = window.SchemaForms.render(document.getElementById("form"), options);
    return true;
  },
};

fetch("/schema.json")
  .then((response) => response.json())
  .then((schema) => {
    window.harness.schema = schema;
    document.body.dataset.ready = "yes";
  });
