// The page tests/editor/test_forms.py drives: forms.js alone, on the schema `llm-fsm schema` prints, with every
// onChange, onRename, onInvalid and onUseTool call recorded for the test to read, in one list too (`events`) for
// their order.
"use strict";

window.harness = {
  schema: null,
  changes: [],
  renames: [],
  invalids: [],
  tools: [],
  events: [],
  // the page's store of text not applied: kept across renders (as the page keeps one per element) until reset
  drafts: {},
  handle: null,
  // extra: any render option, plus rename: true (record onRename), drafts: true (pass harness.drafts),
  // useTool: true (record onUseTool). Returns how many onChange calls render itself made (none, ever).
  render(type, value, extra) {
    const more = Object.assign({}, extra || {});
    const renames = more.rename;
    const drafts = more.drafts;
    const useTool = more.useTool;
    delete more.rename;
    delete more.drafts;
    delete more.useTool;
    this.changes = [];
    this.renames = [];
    this.invalids = [];
    this.tools = [];
    this.events = [];
    const options = Object.assign(
      {
        schema: this.schema,
        type,
        value,
        onChange: (changed) => {
          this.changes.push(changed);
          this.events.push("change");
        },
        onInvalid: (paths) => {
          this.invalids.push(paths);
          this.events.push("invalid");
        },
      },
      renames ? { onRename: (id) => this.renames.push(id) } : {},
      drafts ? { drafts: this.drafts } : {},
      useTool
        ? {
            onUseTool: (name) => {
              this.tools.push(name);
              this.events.push(`tool ${name}`);
            },
          }
        : {},
      more,
    );
    this.handle = window.SchemaForms.render(document.getElementById("form"), options);
    return this.changes.length;
  },
};

fetch("/schema.json")
  .then((response) => response.json())
  .then((schema) => {
    window.harness.schema = schema;
    document.body.dataset.ready = "yes";
  });
