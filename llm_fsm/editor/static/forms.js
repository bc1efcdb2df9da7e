// Forms from the definition's JSON Schema (schema/fsm.schema.json), for `llm-fsm edit`'s page.
//
// window.SchemaForms.render(container, options) draws the form of one part of a definition (its top level, a
// state, a transition, a global transition, or any other $defs type) and calls options.onChange(newValue) with the
// whole edited object each time the author changes a field to something valid. Plain JavaScript, no build step, no
// dependencies; every text (the schema's, the file's, the catalog's) is inserted with textContent, never as HTML.
//
// The file is the author's: a field nobody touched stays absent (no default is ever written), clearing an optional
// field removes its key, and the object handed to onChange keeps the original key order with new keys put at
// their schema-order place (after the last key already there that the schema puts before them), existing keys never
// moved, so the page's save (llm_fsm.editor.json_edit.render) rewrites only what changed. Text that is not valid
// yet (bad JSON, a pattern not matched, a number out of range) stays in its box with the reason beside it and is
// not applied: nothing the author typed is lost, and the definition never holds what the schema refuses. Such text
// also goes to options.drafts (the page's, kept per element) and comes back there when the form is drawn again;
// options.onInvalid hears which fields hold it. A select's unset choice removes the key (never writes "").
//
// Which widget: enum/const -> <select> (an optional one starts with an unset choice, data-unset); boolean ->
// checkbox (unchecked back to the default removes the key), or unset/true/false when optional with no default;
// integer/number -> number input with the schema's min/max; string -> input, or a textarea for prose (PROSE
// below); a state id (target_state, initial_state, fallback_state, with options.stateIds) -> <select> of the
// states ("$return" for targets); a list of strings -> a list editor (add, reorder, remove; except_states offers
// the states, a state's tools and handlers what --hooks provides); anything else (objects, lists of objects, a
// field of several kinds) -> a JSON box checked as typed against the schema, conditions and a state's checks also
// one card each (a check's kind a <select> of the schema's kinds, then that kind's fields; the cards show only
// the applied value, and are disabled while the box holds text not applied, so no card edit applies it); the
// top-level tools list what --hooks provides, each with Declare (adds {}, the minimal declaration the loader accepts).
// Every input has name and data-field = its JSON path ("purpose", "transitions.0.priority", list items
// "tools.0", a list's new-item box "tools.new", a card's "conditions.0.logic", "checks.0.kind"); a field's box is
// .sf-field[data-key=KEY], its error .sf-error, its remove-the-key button [data-clear=PATH]. Notes beside a field
// are block elements, one per line, so their words never run together whatever the page's CSS.
"use strict";

(function (global) {
  const REMOVE = Symbol("remove"); // a field's value when its key should vanish from the object

  // Prose: a textarea (several lines) rather than a one-line input. Decided by name, since the schema gives no
  // maxLength for them; a string field with a maxLength of 200 or less is always a one-line input.
  const PROSE = new Set([
    "description",
    "purpose",
    "instructions",
    "extraction_instructions",
    "response_instructions",
    "persona",
    "opening",
    "rubric",
    "initial",
    "fallback",
    "pause",
    "approval",
    "step_failed",
  ]);
  // Fields holding a state id: a choice of the definition's states (options.stateIds), "$return" where allowed.
  const STATE_FIELDS = { target_state: { allowReturn: true }, initial_state: {}, fallback_state: {} };
  const STATE_LISTS = new Set(["except_states"]);

  const own = (object, key) => Object.prototype.hasOwnProperty.call(object, key);
  const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);
  const clone = (value) => (value === undefined ? undefined : JSON.parse(JSON.stringify(value)));
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  const isEmptyish = (value) =>
    value === null ||
    value === "" ||
    (Array.isArray(value) && value.length === 0) ||
    (isObject(value) && Object.keys(value).length === 0);

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function humanize(key) {
    const words = String(key).replace(/^\$/, "").split("_").filter(Boolean);
    const text = words.join(" ");
    return text ? text.charAt(0).toUpperCase() + text.slice(1) : String(key);
  }

  // -- the schema ---------------------------------------------------------------------------------------------

  function resolveRef(root, ref) {
    if (typeof ref !== "string" || !ref.startsWith("#")) throw new Error(`SchemaForms: cannot follow $ref ${ref}`);
    let node = root;
    for (const raw of ref.slice(1).split("/").filter(Boolean)) {
      const part = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
      if (!node || typeof node !== "object" || !own(node, part)) {
        throw new Error(`SchemaForms: no ${ref} in the schema`);
      }
      node = node[part];
    }
    return node;
  }

  // The schema a $ref points at, with the referring node's own keywords (description, default...) over it.
  function deref(root, schema) {
    let node = schema;
    for (let hops = 0; node && typeof node === "object" && typeof node.$ref === "string"; hops++) {
      if (hops > 64) throw new Error("SchemaForms: $ref loop in the schema");
      const target = resolveRef(root, node.$ref);
      const rest = Object.assign({}, node);
      delete rest.$ref;
      node = Object.keys(rest).length ? Object.assign({}, target, rest) : target;
    }
    return node;
  }

  function typeSchema(root, type) {
    if (!isObject(root)) throw new Error("SchemaForms: options.schema is not a JSON Schema object");
    if (!type || type === "definition") return root;
    const defs = root.$defs || {};
    if (!own(defs, type)) {
      const known = Object.keys(defs).join(", ");
      throw new Error(`SchemaForms: no type ${JSON.stringify(type)} in the schema's $defs (${known})`);
    }
    return defs[type];
  }

  // What widget a property gets: {kind, inner (the schema of its one non-null form), nullable}.
  function classify(root, property) {
    let inner = deref(root, property);
    let nullable = false;
    const branches = inner.anyOf || inner.oneOf;
    if (Array.isArray(branches) && inner.type === undefined) {
      const kept = branches.filter((branch) => deref(root, branch).type !== "null");
      nullable = kept.length < branches.length;
      if (kept.length !== 1) return { kind: "json", inner, nullable };
      inner = deref(root, kept[0]);
    }
    if (inner.enum !== undefined || inner.const !== undefined) return { kind: "enum", inner, nullable };
    const type = inner.type;
    if (type === "boolean") return { kind: "bool", inner, nullable };
    if (type === "integer" || type === "number") return { kind: "number", inner, nullable };
    if (type === "string") return { kind: "string", inner, nullable };
    if (type === "array" && inner.items) {
      const items = deref(root, inner.items);
      if (items.type === "string" && items.enum === undefined) return { kind: "list", inner, items, nullable };
    }
    return { kind: "json", inner, nullable };
  }

  // -- validation (the part of JSON Schema fsm.schema.json uses) ----------------------------------------------

  function pathLabel(path, key) {
    if (typeof key === "number") return `${path}[${key}]`;
    const name = /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? key : JSON.stringify(key);
    if (!path) return name;
    return name === key ? `${path}.${key}` : `${path}[${name}]`;
  }

  function typeOf(value) {
    if (value === null) return "null";
    if (Array.isArray(value)) return "array";
    if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
    return typeof value;
  }

  function isType(value, type) {
    switch (type) {
      case "null":
        return value === null;
      case "array":
        return Array.isArray(value);
      case "object":
        return isObject(value);
      case "integer":
        return typeof value === "number" && Number.isInteger(value);
      case "number":
        return typeof value === "number" && Number.isFinite(value);
      default:
        return typeof value === type;
    }
  }

  function orList(words) {
    if (words.length <= 1) return words.join("");
    return `${words.slice(0, -1).join(", ")} or ${words[words.length - 1]}`;
  }

  function describeSchema(root, schema) {
    const node = deref(root, schema);
    if (node.const !== undefined) return JSON.stringify(node.const);
    if (Array.isArray(node.enum)) return orList(node.enum.map((v) => JSON.stringify(v)));
    const type = Array.isArray(node.type) ? orList(node.type) : node.type;
    if (node.title && type === "object" && schema.$ref) return `${node.title} (an object)`;
    if (type === "array" && node.items) {
      const items = deref(root, node.items);
      if (items.type && !Array.isArray(items.type)) return `a list of ${items.type}s`;
    }
    if (type) return type;
    const branches = node.anyOf || node.oneOf;
    if (Array.isArray(branches)) return orList(branches.map((b) => describeSchema(root, b)));
    return "a value";
  }

  // Whether the value has the shape (type, const or enum) a branch of anyOf/oneOf is about.
  function shapeFits(root, schema, value) {
    const node = deref(root, schema);
    if (node.type !== undefined) {
      const types = Array.isArray(node.type) ? node.type : [node.type];
      return types.some((type) => isType(value, type));
    }
    if (node.const !== undefined) return typeOf(node.const) === typeOf(value);
    if (Array.isArray(node.enum)) return node.enum.some((v) => typeOf(v) === typeOf(value));
    const branches = node.anyOf || node.oneOf;
    if (Array.isArray(branches)) return branches.some((b) => shapeFits(root, b, value));
    if (Array.isArray(node.allOf)) return node.allOf.every((b) => shapeFits(root, b, value));
    return true;
  }

  function at(path) {
    return path || "(the value)";
  }

  function checkBranches(root, schema, branches, value, path, out) {
    const results = branches.map((branch) => {
      const found = [];
      check(root, branch, value, path, found);
      return found;
    });
    if (results.some((found) => found.length === 0)) return;
    const tag = schema.discriminator;
    if (tag && typeof tag.propertyName === "string" && isObject(value)) {
      const mapping = tag.mapping || {};
      const chosen = value[tag.propertyName];
      if (typeof chosen === "string" && own(mapping, chosen)) {
        check(root, { $ref: mapping[chosen] }, value, path, out);
      } else {
        const given = chosen === undefined ? "missing" : `got ${JSON.stringify(chosen)}`;
        const choices = Object.keys(mapping).map((k) => JSON.stringify(k));
        out.push(`${pathLabel(path, tag.propertyName)}: must be one of ${choices.join(", ")} (${given})`);
      }
      return;
    }
    const fitting = branches.map((b, i) => i).filter((i) => shapeFits(root, branches[i], value));
    if (fitting.length) {
      let best = fitting[0];
      for (const i of fitting) if (results[i].length < results[best].length) best = i;
      out.push(...results[best]);
      return;
    }
    const expected = orList(branches.map((b) => describeSchema(root, b)));
    out.push(`${at(path)}: expected ${expected}, got ${typeOf(value)}`);
  }

  function check(root, schema, value, path, out) {
    if (schema === true || schema === undefined || schema === null) return;
    if (schema === false) {
      out.push(`${at(path)}: not allowed`);
      return;
    }
    const node = deref(root, schema);
    if (Array.isArray(node.allOf)) for (const part of node.allOf) check(root, part, value, path, out);
    if (Array.isArray(node.anyOf)) checkBranches(root, node, node.anyOf, value, path, out);
    if (Array.isArray(node.oneOf)) checkBranches(root, node, node.oneOf, value, path, out);
    if (node.type !== undefined) {
      const types = Array.isArray(node.type) ? node.type : [node.type];
      if (!types.some((type) => isType(value, type))) {
        out.push(`${at(path)}: expected ${orList(types)}, got ${typeOf(value)}`);
        return;
      }
    }
    if (node.const !== undefined && !same(node.const, value)) {
      out.push(`${at(path)}: must be ${JSON.stringify(node.const)}, not ${JSON.stringify(value)}`);
    }
    if (Array.isArray(node.enum) && !node.enum.some((choice) => same(choice, value))) {
      const choices = node.enum.map((v) => JSON.stringify(v)).join(", ");
      out.push(`${at(path)}: must be one of ${choices}, not ${JSON.stringify(value)}`);
    }
    if (typeof value === "string") {
      const length = Array.from(value).length;
      if (typeof node.minLength === "number" && length < node.minLength) {
        out.push(`${at(path)}: at least ${node.minLength} character${node.minLength === 1 ? "" : "s"}`);
      }
      if (typeof node.maxLength === "number" && length > node.maxLength) {
        out.push(`${at(path)}: at most ${node.maxLength} characters (this is ${length})`);
      }
      if (typeof node.pattern === "string" && !new RegExp(node.pattern, "u").test(value)) {
        out.push(`${at(path)}: ${JSON.stringify(value)} does not match ${node.pattern}`);
      }
    }
    if (typeof value === "number") {
      if (typeof node.minimum === "number" && value < node.minimum) out.push(`${at(path)}: at least ${node.minimum}`);
      if (typeof node.maximum === "number" && value > node.maximum) out.push(`${at(path)}: at most ${node.maximum}`);
      if (typeof node.exclusiveMinimum === "number" && value <= node.exclusiveMinimum) {
        out.push(`${at(path)}: more than ${node.exclusiveMinimum}`);
      }
      if (typeof node.exclusiveMaximum === "number" && value >= node.exclusiveMaximum) {
        out.push(`${at(path)}: less than ${node.exclusiveMaximum}`);
      }
    }
    if (Array.isArray(value)) {
      if (typeof node.minItems === "number" && value.length < node.minItems) {
        out.push(`${at(path)}: at least ${node.minItems} item${node.minItems === 1 ? "" : "s"}`);
      }
      if (typeof node.maxItems === "number" && value.length > node.maxItems) {
        out.push(`${at(path)}: at most ${node.maxItems} items`);
      }
      if (node.items !== undefined) value.forEach((item, i) => check(root, node.items, item, pathLabel(path, i), out));
    }
    if (isObject(value)) {
      const keys = Object.keys(value);
      for (const name of node.required || []) {
        if (!own(value, name)) out.push(`${pathLabel(path, name)}: required (missing)`);
      }
      if (typeof node.minProperties === "number" && keys.length < node.minProperties) {
        out.push(`${at(path)}: at least ${node.minProperties} entr${node.minProperties === 1 ? "y" : "ies"}`);
      }
      const properties = isObject(node.properties) ? node.properties : {};
      for (const key of keys) {
        if (node.propertyNames !== undefined) {
          const found = [];
          check(root, node.propertyNames, key, "", found);
          if (found.length) out.push(`${pathLabel(path, key)}: the name ${JSON.stringify(key)} is not allowed`);
        }
        if (own(properties, key)) {
          check(root, properties[key], value[key], pathLabel(path, key), out);
        } else if (node.additionalProperties === false) {
          const known = Object.keys(properties);
          const where = node.title ? `${node.title} has` : "there is";
          out.push(`${pathLabel(path, key)}: not allowed (${where} no such field; fields: ${known.join(", ")})`);
        } else if (node.additionalProperties !== undefined) {
          check(root, node.additionalProperties, value[key], pathLabel(path, key), out);
        }
      }
    }
  }

  /** The problems of `value` as a `defName` ("definition" or a $defs name): ["path: what is wrong", ...]. */
  function validate(schema, defName, value, path) {
    const out = [];
    check(schema, typeSchema(schema, defName), value, path || "", out);
    return out;
  }

  // -- JSON text: where it goes wrong, as line:column ---------------------------------------------------------

  // JSON.parse says where only in some engines and in words that vary; this scanner finds the first mistake.
  function jsonMistake(text) {
    let i = 0;
    const n = text.length;
    const stop = (message, where) => {
      throw { where: where === undefined ? i : where, message };
    };
    const shown = (c) => (c === undefined ? "the end of the text" : JSON.stringify(c));
    const spaces = () => {
      while (i < n && " \t\n\r".includes(text[i])) i++;
    };
    const string = () => {
      const start = i++;
      for (;;) {
        if (i >= n) stop("this string is not closed (a \" is missing)", start);
        const c = text[i];
        if (c === '"') {
          i++;
          return;
        }
        if (c === "\\") {
          const next = text[i + 1];
          if (next === "u") {
            if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) stop("\\u needs four hex digits");
            i += 6;
          } else if (next !== undefined && '"\\/bfnrt'.includes(next)) {
            i += 2;
          } else {
            stop(`unknown escape \\${next === undefined ? "" : next}`);
          }
          continue;
        }
        if (c < " ") stop("a line break or control character inside a string (write \\n)");
        i++;
      }
    };
    const value = () => {
      spaces();
      const c = text[i];
      if (c === "{") {
        i++;
        spaces();
        if (text[i] === "}") {
          i++;
          return;
        }
        for (;;) {
          spaces();
          if (text[i] !== '"') stop(`expected a "quoted" key, found ${shown(text[i])}`);
          string();
          spaces();
          if (text[i] !== ":") stop(`expected ":" after the key, found ${shown(text[i])}`);
          i++;
          value();
          spaces();
          if (text[i] === ",") {
            i++;
            spaces();
            if (text[i] === "}") stop('a comma before "}" (JSON allows no trailing comma)');
            continue;
          }
          if (text[i] === "}") {
            i++;
            return;
          }
          stop(`expected "," or "}", found ${shown(text[i])}`);
        }
      }
      if (c === "[") {
        i++;
        spaces();
        if (text[i] === "]") {
          i++;
          return;
        }
        for (;;) {
          value();
          spaces();
          if (text[i] === ",") {
            i++;
            spaces();
            if (text[i] === "]") stop('a comma before "]" (JSON allows no trailing comma)');
            continue;
          }
          if (text[i] === "]") {
            i++;
            return;
          }
          stop(`expected "," or "]", found ${shown(text[i])}`);
        }
      }
      if (c === '"') return string();
      if (c === "-" || (c >= "0" && c <= "9")) {
        const number = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
        number.lastIndex = i;
        const found = number.exec(text);
        if (!found) stop("not a number");
        i = number.lastIndex;
        return;
      }
      for (const word of ["true", "false", "null"]) {
        if (text.startsWith(word, i)) {
          i += word.length;
          return;
        }
      }
      if (c === undefined) stop("the text ends where a value should be");
      stop(`unexpected ${shown(c)}: a value (object, list, "string", number, true, false or null) goes here`);
    };
    try {
      value();
      spaces();
      if (i < n) stop(`unexpected ${shown(text[i])} after the value`);
      return null;
    } catch (mistake) {
      if (!mistake || typeof mistake.where !== "number") throw mistake;
      const before = text.slice(0, mistake.where);
      const line = before.split("\n").length;
      const column = mistake.where - before.lastIndexOf("\n");
      return { line, column, message: mistake.message };
    }
  }

  /** {value} when `text` is JSON, else {error: "line L:C: what"}. */
  function parseJson(text) {
    try {
      return { value: JSON.parse(text) };
    } catch (error) {
      const mistake = jsonMistake(text);
      if (mistake) return { error: `not JSON, line ${mistake.line}:${mistake.column}: ${mistake.message}` };
      return { error: `not JSON: ${error.message}` };
    }
  }

  // -- what --hooks provides ----------------------------------------------------------------------------------

  // llm_fsm.editor.catalog's shape: {tools: [{name, description, parameters (JSON Schema or null), required,
  // declared, registered}], checks: [{name, accepts (keywords, or null: any)}], handlers: [{name, timings, named,
  // states, targets, keys, arguments (keywords, or null: any), policy}]}. Read defensively: each list may also be a
  // list of names or an object keyed by name, an entry without a name is left out, and a kind the catalog does not
  // have (no catalog at all, or no "tools" in it) gets no notes and no warnings: nothing is known about it.
  function entries(list) {
    if (Array.isArray(list)) {
      return list
        .map((entry) => (typeof entry === "string" ? { name: entry } : entry))
        .filter((entry) => isObject(entry) && typeof entry.name === "string");
    }
    if (isObject(list)) {
      return Object.keys(list).map((name) => Object.assign({}, isObject(list[name]) ? list[name] : {}, { name }));
    }
    return null;
  }

  function normalizeCatalog(catalog) {
    if (!isObject(catalog)) return { tools: null, checks: null, handlers: null };
    return { tools: entries(catalog.tools), checks: entries(catalog.checks), handlers: entries(catalog.handlers) };
  }

  const names = (value) =>
    Array.isArray(value)
      ? value.map(String)
      : typeof value === "string"
        ? [value]
        : isObject(value)
          ? Object.keys(value)
          : [];

  const first = (entry, ...keys) => {
    for (const key of keys) if (own(entry, key)) return entry[key];
    return undefined;
  };

  function keywordsNote(entry, ...keys) {
    const keywords = first(entry, ...keys);
    if (keywords === null) return "takes any keywords";
    const listed = names(keywords);
    return listed.length ? `takes: ${listed.join(", ")}` : "";
  }

  function toolParameters(tool) {
    const parameters = isObject(tool.parameters) ? tool.parameters : {};
    const properties = isObject(parameters.properties) ? parameters.properties : {};
    const required = new Set(names(tool.required !== undefined ? tool.required : parameters.required));
    const parts = Object.keys(properties).map((name) => {
      const spec = isObject(properties[name]) ? properties[name] : {};
      const type = Array.isArray(spec.type) ? spec.type.join("|") : spec.type;
      const bits = [typeof type === "string" ? type : null, required.has(name) ? "required" : null].filter(Boolean);
      return bits.length ? `${name} (${bits.join(", ")})` : name;
    });
    for (const name of required) if (!own(properties, name)) parts.push(`${name} (required)`);
    return parts.length ? `parameters: ${parts.join(", ")}` : "no parameters";
  }

  function toolNeeds(tool) {
    const notes = [toolParameters(tool)];
    if (tool.declared === true) notes.push("declared in the definition's tools");
    if (tool.registered === true) notes.push("registered by --hooks");
    return notes.join(" · ");
  }

  // A tool is provided when --hooks registers it (an entry with registered: false is only declared: an MCP
  // server may serve it, the forms cannot tell).
  function toolMissing(entry) {
    if (!entry) return "not provided by --hooks";
    if (entry.registered === false) return "declared in the definition's tools but not provided by --hooks";
    return null;
  }

  function handlerNeeds(handler) {
    const parts = [];
    const timings = names(first(handler, "timings", "on"));
    if (timings.length) parts.push(`runs on ${timings.join(", ")}`);
    const keys = names(first(handler, "keys", "wants"));
    if (keys.length) parts.push(`when these keys change: ${keys.join(", ")}`);
    const states = names(handler.states);
    if (states.length) parts.push(`states: ${states.join(", ")}`);
    const targets = names(handler.targets);
    if (targets.length) parts.push(`moving to: ${targets.join(", ")}`);
    const takes = keywordsNote(handler, "arguments", "accepts", "keywords");
    if (takes) parts.push(takes);
    if (handler.named === false) parts.push("runs without being listed (registered with @hooks.on)");
    return parts.join(" · ");
  }

  function checkNeeds(entry) {
    return keywordsNote(entry, "accepts", "keywords", "arguments");
  }

  const NEEDS = {
    tools: (tool, parametersOnly) => (parametersOnly ? toolParameters(tool) : toolNeeds(tool)),
    handlers: handlerNeeds,
    checks: checkNeeds,
  };

  // -- the form -----------------------------------------------------------------------------------------------

  let formCount = 0;

  /**
   * Draw the form of `options.value` (an object of type `options.type`) into `container`, replacing what it held.
   *
   * options: schema (the JSON Schema), type ("definition" or a $defs name), value, onChange(newValue), catalog
   * ({tools, checks, handlers}), omit (field names drawn elsewhere), stateIds (the definition's state ids, for the
   * fields that name a state), onRename(newId) with id (a state form's id field: renames rather than writes `id`),
   * prefix (put before every data-field, e.g. "transitions.0." for a form drawn inside another).
   * drafts: an object the page owns, one per element, kept across renders: each field holding text the schema
   * refuses is stored in it by data-field ({"purpose": "...", "conditions": "[{", "tools": ["a", "b c"]}: the text
   * as typed; a list's value is its items' texts), and deleted once the field is valid, emptied or cleared. On
   * render the drafts are put back in their fields, with their errors (one the schema accepts after all is
   * applied: onChange then follows right after render returns, never during it).
   * onInvalid(paths): called once at the end of render with the fields holding text not applied (the data-field
   * paths, inner forms' included: [] unless drafts were restored), then each time that set changes.
   * onUseTool(name): a state's tools list gained a tool the catalog knows (its Add, or a known name typed), or the
   * author asked to declare an unknown one (its note's Declare): called right after the onChange that added it,
   * in the same click, for the page to declare the tool at the top level (in the same undo step).
   * Returns {element, value(), invalid()}: the form, the value as edited, the fields whose text is not applied.
   */
  function render(container, options) {
    const o = options || {};
    const root = o.schema;
    const type = o.type || "definition";
    const node = deref(root, typeSchema(root, type));
    const properties = isObject(node.properties) ? node.properties : {};
    const required = new Set(node.required || []);
    const original = isObject(o.value) ? o.value : {};
    const current = clone(original);
    const order = Object.keys(original);
    const omit = new Set(o.omit || []);
    const catalog = normalizeCatalog(o.catalog);
    const stateIds = Array.isArray(o.stateIds) ? o.stateIds.map(String) : null;
    const prefix = typeof o.prefix === "string" ? o.prefix : "";
    const labelBase = prefix
      .split(".")
      .filter(Boolean)
      .reduce((path, part) => pathLabel(path, /^[0-9]+$/.test(part) ? Number(part) : part), "");
    const form = el("div", "sf-form");
    form.dataset.type = type;
    const number = ++formCount;
    const invalid = new Set();
    const nested = new Map(); // a field's path -> the invalid fields of the forms drawn inside it
    // The page's store of text not applied yet ({data-field: text}), kept across renders so that selecting another
    // element and coming back shows the author's text again (with its error) rather than losing it.
    const drafts = o.drafts !== null && typeof o.drafts === "object" ? o.drafts : null;
    const schemaOrder = Object.keys(properties);
    let building = true; // while drawing, a restored draft that is valid after all is applied after render returns
    let emitted = JSON.stringify(output());
    let reported = null; // the invalid fields onInvalid last heard of (none yet: it hears once drawn)

    function output() {
      const out = {};
      for (const key of order) if (own(current, key)) out[key] = current[key];
      return clone(out);
    }

    // A new key goes at its place in the schema's property order: after the last key already there that the
    // schema puts before it (else before the first that it puts after it); the keys already there never move.
    function place(key) {
      const rank = schemaOrder.indexOf(key);
      if (rank < 0) return order.length;
      let after = -1;
      let before = -1;
      order.forEach((other, i) => {
        const otherRank = schemaOrder.indexOf(other);
        if (otherRank < 0) return;
        if (otherRank < rank) after = i;
        else if (before < 0) before = i;
      });
      if (after >= 0) return after + 1;
      return before >= 0 ? before : order.length;
    }

    function emit() {
      const out = output();
      const text = JSON.stringify(out);
      if (text === emitted) return;
      emitted = text;
      if (typeof o.onChange === "function") o.onChange(out);
    }

    function set(key, value) {
      if (value === REMOVE) {
        delete current[key];
      } else {
        current[key] = clone(value);
        if (!order.includes(key)) order.splice(place(key), 0, key);
      }
      if (!building) emit();
    }

    // onInvalid(paths) once drawn, then each time the set of fields holding text not applied changes
    function notify() {
      if (building) return;
      const now = invalidFields();
      const text = JSON.stringify(now.slice().sort());
      if (text === reported) return;
      reported = text;
      if (typeof o.onInvalid === "function") o.onInvalid(now);
    }

    // A field holds text the schema refuses: it is kept (in drafts, when the page gave a store) and reported.
    // text undefined: the field is not valid but its text cannot be read back (a number input's bad input).
    function hold(path, text) {
      invalid.add(path);
      if (drafts) {
        if (text === undefined) delete drafts[path];
        else drafts[path] = clone(text);
      }
      notify();
    }

    function release(path) {
      invalid.delete(path);
      if (drafts) delete drafts[path];
      notify();
    }

    function draftOf(path) {
      return drafts && own(drafts, path) ? drafts[path] : undefined;
    }

    // Forget the drafts of a field and of every field inside it (its key removed, its cards drawn anew).
    function dropDrafts(path) {
      if (!drafts) return;
      for (const name of Object.keys(drafts)) if (name === path || name.startsWith(`${path}.`)) delete drafts[name];
    }

    // The cards of a list moved: their drafts follow them (moved(i) is card i's new index, null when it is gone).
    function moveDrafts(path, moved) {
      if (!drafts) return;
      const taken = {};
      for (const name of Object.keys(drafts)) {
        const found = name.slice(path.length + 1).match(/^([0-9]+)(\..*)$/);
        if (!name.startsWith(`${path}.`) || !found) continue;
        const to = moved(Number(found[1]));
        if (to !== null) taken[`${path}.${to}${found[2]}`] = drafts[name];
        delete drafts[name];
      }
      Object.assign(drafts, taken);
    }

    // The value of a field the author emptied: what the file had if that was already empty (null, "", []),
    // else the key goes (an optional field) or is the empty text (a required one the file had).
    function emptied(key, empty) {
      if (own(original, key) && isEmptyish(original[key])) return original[key];
      if (required.has(key) && own(original, key)) return empty;
      return REMOVE;
    }

    // A select's unset choice: the key goes (required or not: the problems list then says it is missing), never
    // "" or null written in its place, unless the file itself held null there (null stays null).
    function unchosen(key) {
      return own(original, key) && original[key] === null ? null : REMOVE;
    }

    for (const key of Object.keys(properties)) {
      if (omit.has(key)) continue;
      if (key === "id" && type === "State" && typeof o.onRename === "function") {
        form.append(renameField(properties[key]));
        continue;
      }
      form.append(field(key, properties[key], false));
    }
    for (const key of Object.keys(original)) {
      if (!own(properties, key) && !omit.has(key)) form.append(field(key, {}, true));
    }
    container.replaceChildren(form);
    building = false;
    // a draft restored above that the schema now accepts was applied to the value: tell the page once drawn
    if (JSON.stringify(output()) !== emitted) queueMicrotask(emit);
    notify();
    return { element: form, value: output, invalid: invalidFields };

    function invalidFields() {
      return [...invalid, ...Array.from(nested.values()).flatMap((inside) => inside())];
    }

    // One field: its label, help, input, error and notes; redrawn whole when its key is cleared.
    function field(key, property, stray) {
      const path = prefix + key;
      const spec = stray ? { kind: "json", inner: {}, nullable: true } : classify(root, property);
      const box = el("div", `sf-field sf-kind-${spec.kind}`);
      box.dataset.key = key;
      const id = `sf${number}-${path.replace(/[^A-Za-z0-9_-]/g, "_")}`;
      const description = property.description || spec.inner.description || "";
      const head = el("div", "sf-head");
      const label = el("label", "sf-label", property.title || humanize(key));
      label.htmlFor = id;
      head.append(label);
      if (required.has(key)) {
        const mark = el("span", "sf-required", "*");
        mark.title = "required";
        head.append(mark);
        box.classList.add("sf-is-required");
      }
      box.append(head);
      if (description) {
        box.title = description;
        const help = el("small", "sf-help", description);
        help.id = `${id}-help`;
        box.append(help);
      }
      if (stray) box.append(el("small", "sf-warning", `not a field of ${node.title || type}: the loader refuses it`));
      const error = el("div", "sf-error");
      error.setAttribute("role", "alert");
      error.hidden = true;
      const notes = el("div", "sf-notes");
      const ctx = { key, path, id, property, spec, description, error, notes, box, redraw };

      function redraw() {
        invalid.delete(path);
        nested.delete(path);
        dropDrafts(path);
        box.replaceWith(field(key, property, stray));
        notify();
      }

      const clear = el("button", "sf-clear", "×");
      clear.type = "button";
      clear.title = "Remove this field from the file (its default applies)";
      clear.dataset.clear = path;
      clear.hidden = !own(current, key);
      clear.addEventListener("click", () => {
        set(key, REMOVE);
        redraw();
      });
      if (!required.has(key)) head.append(clear);
      ctx.touched = () => {
        clear.hidden = !own(current, key);
      };
      // fail: what is wrong with the file's value (shown, nothing typed is held); hold: the author's text is
      // refused, kept in the field (and the drafts) and reported through onInvalid until it is fixed or cleared
      ctx.fail = (messages) => {
        const list = Array.isArray(messages) ? messages : [messages];
        error.replaceChildren(...list.slice(0, 6).map((message) => el("div", null, message)));
        if (list.length > 6) error.append(el("div", null, `and ${list.length - 6} more`));
        error.hidden = false;
        box.classList.add("sf-invalid");
      };
      ctx.hold = (messages, text) => {
        ctx.fail(messages);
        hold(path, text);
      };
      ctx.draft = () => draftOf(path);
      ctx.ok = () => {
        error.replaceChildren();
        error.hidden = true;
        box.classList.remove("sf-invalid");
        release(path);
      };
      ctx.apply = (value) => {
        ctx.ok();
        set(key, value);
        ctx.touched();
      };
      ctx.label = pathLabel(labelBase, key);

      const maker =
        spec.kind === "string" && own(STATE_FIELDS, key) && stateIds
          ? stateField
          : { enum: enumField, bool: boolField, number: numberField, string: textField, list: listField }[spec.kind] ||
            jsonField;
      const input = maker(ctx);
      error.id = `${id}-error`;
      for (const control of [input, ...input.querySelectorAll("input,select,textarea")]) {
        if (!control.matches("input,select,textarea")) continue;
        if (description && !control.title) control.title = description;
        if (control.id === id) {
          control.setAttribute("aria-describedby", description ? `${id}-help ${id}-error` : `${id}-error`);
        }
      }
      box.append(input, error, notes);
      return box;
    }

    function mark(control, path, id) {
      control.name = path;
      control.dataset.field = path;
      if (id) control.id = id;
      return control;
    }

    function shownDefault(property, inner) {
      const fallback = property.default !== undefined ? property.default : inner.default;
      if (fallback === undefined || fallback === null || fallback === "") return "";
      return typeof fallback === "string" ? fallback : JSON.stringify(fallback);
    }

    function textField(ctx) {
      const { key, property, spec } = ctx;
      const maxLength = spec.inner.maxLength;
      const long = PROSE.has(key) && !(typeof maxLength === "number" && maxLength <= 200);
      const control = mark(el(long ? "textarea" : "input", long ? "sf-text" : "sf-input"), ctx.path, ctx.id);
      if (!long) control.type = "text";
      const value = current[key];
      control.value = typeof value === "string" ? value : "";
      if (long) control.rows = Math.min(12, Math.max(2, control.value.split("\n").length + 1));
      const fallback = shownDefault(property, spec.inner);
      if (fallback) control.placeholder = `default: ${fallback}`;
      if (typeof value !== "string" && value !== undefined && value !== null) {
        ctx.fail(`${ctx.label}: the file holds ${JSON.stringify(value)}, not a text; typing here replaces it`);
      }
      const typed = () => {
        const text = control.value;
        if (text === "") {
          ctx.ok();
          set(key, emptied(key, ""));
          ctx.touched();
          return;
        }
        const problems = [];
        check(root, spec.inner, text, ctx.label, problems);
        if (problems.length) ctx.hold(problems, text);
        else ctx.apply(text);
      };
      control.addEventListener("input", typed);
      const draft = ctx.draft();
      if (typeof draft === "string" && draft !== "") {
        control.value = draft;
        typed();
      }
      return control;
    }

    function stateField(ctx) {
      const { key } = ctx;
      const control = mark(el("select", "sf-select sf-state"), ctx.path, ctx.id);
      const value = current[key];
      const unset = el("option", null, required.has(key) ? "(choose a state)" : "(none)");
      unset.value = "";
      unset.dataset.unset = "1";
      control.append(unset);
      const choices = stateIds.slice();
      if (STATE_FIELDS[key].allowReturn) choices.push("$return");
      for (const choice of choices) {
        const option = el("option", null, choice === "$return" ? "$return (back where it came from)" : choice);
        option.value = choice;
        control.append(option);
      }
      if (typeof value === "string" && value !== "" && !choices.includes(value)) {
        const option = el("option", null, `${value} (no such state)`);
        option.value = value;
        control.append(option);
        ctx.notes.append(el("small", "sf-warning", `${value}: no such state in this definition`));
      }
      control.value = typeof value === "string" ? value : "";
      control.addEventListener("change", () => {
        ctx.notes.replaceChildren();
        if (control.value === "") ctx.apply(unchosen(key));
        else ctx.apply(control.value);
      });
      return control;
    }

    function enumField(ctx) {
      const { key, property, spec } = ctx;
      const control = mark(el("select", "sf-select"), ctx.path, ctx.id);
      const choices = spec.inner.enum !== undefined ? spec.inner.enum : [spec.inner.const];
      const value = current[key];
      const present = own(current, key) && value !== null;
      const byText = new Map();
      if (!required.has(key) || !present) {
        const fallback = shownDefault(property, spec.inner);
        const shown = required.has(key) ? "(choose)" : fallback ? `(default: ${fallback})` : "(none)";
        const unset = el("option", null, shown);
        unset.value = "";
        unset.dataset.unset = "1";
        control.append(unset);
      }
      for (const choice of choices) {
        const text = typeof choice === "string" ? choice : JSON.stringify(choice);
        byText.set(text, choice);
        const option = el("option", null, text);
        option.value = text;
        control.append(option);
      }
      if (present && !choices.some((choice) => same(choice, value))) {
        const text = typeof value === "string" ? value : JSON.stringify(value);
        const option = el("option", null, `${text} (not allowed)`);
        option.value = text;
        option.dataset.stray = "1";
        byText.set(text, value);
        control.append(option);
        ctx.notes.append(el("small", "sf-warning", `${ctx.label}: ${text} is not one of the choices`));
      }
      control.value = present ? (typeof value === "string" ? value : JSON.stringify(value)) : "";
      control.addEventListener("change", () => {
        ctx.notes.replaceChildren();
        if (control.value === "") ctx.apply(unchosen(key));
        else ctx.apply(byText.get(control.value));
      });
      return control;
    }

    function boolField(ctx) {
      const { key, property, spec } = ctx;
      const fallback = property.default !== undefined ? property.default : spec.inner.default;
      const value = current[key];
      if (typeof fallback === "boolean" || required.has(key)) {
        const wrap = el("span", "sf-check");
        const control = mark(el("input", "sf-checkbox"), ctx.path, ctx.id);
        control.type = "checkbox";
        control.checked = typeof value === "boolean" ? value : fallback === true;
        if (value !== undefined && typeof value !== "boolean") {
          ctx.fail(`${ctx.label}: the file holds ${JSON.stringify(value)}, not true or false`);
        }
        control.addEventListener("change", () => {
          const chosen = control.checked;
          // back to the default: the key goes, unless the file spelled the default out itself
          if (chosen === fallback && !(own(original, key) && original[key] === fallback)) ctx.apply(REMOVE);
          else ctx.apply(chosen);
        });
        wrap.append(control, el("span", "sf-check-note", typeof fallback === "boolean" ? `default: ${fallback}` : ""));
        return wrap;
      }
      // optional with no default: unset / true / false
      const control = mark(el("select", "sf-select sf-tristate"), ctx.path, ctx.id);
      for (const [text, shown] of [
        ["", "(unset)"],
        ["true", "true"],
        ["false", "false"],
      ]) {
        const option = el("option", null, shown);
        option.value = text;
        if (text === "") option.dataset.unset = "1";
        control.append(option);
      }
      control.value = typeof value === "boolean" ? String(value) : "";
      control.addEventListener("change", () => {
        if (control.value === "") ctx.apply(unchosen(key));
        else ctx.apply(control.value === "true");
      });
      return control;
    }

    function numberField(ctx) {
      const { key, property, spec } = ctx;
      const inner = spec.inner;
      const control = mark(el("input", "sf-number"), ctx.path, ctx.id);
      control.type = "number";
      control.step = inner.type === "integer" ? "1" : "any";
      if (typeof inner.minimum === "number") control.min = String(inner.minimum);
      if (typeof inner.maximum === "number") control.max = String(inner.maximum);
      const value = current[key];
      if (typeof value === "number") control.value = String(value);
      else if (value !== undefined && value !== null) {
        ctx.fail(`${ctx.label}: the file holds ${JSON.stringify(value)}, not a number; typing here replaces it`);
      }
      const fallback = shownDefault(property, inner);
      if (fallback) control.placeholder = `default: ${fallback}`;
      const typed = () => {
        if (control.validity.badInput) {
          ctx.hold(`${ctx.label}: not a number`, undefined);
          return;
        }
        if (control.value.trim() === "") {
          ctx.ok();
          set(key, emptied(key, null));
          ctx.touched();
          return;
        }
        const parsed = Number(control.value);
        const problems = [];
        check(root, inner, parsed, ctx.label, problems);
        if (problems.length) ctx.hold(problems, control.value);
        // the file's own spelling of a number (1.0, 1e2) is the writer's to keep: the same number is no change
        else ctx.apply(parsed);
      };
      control.addEventListener("input", typed);
      const draft = ctx.draft();
      if (typeof draft === "string" && draft.trim() !== "") {
        control.value = draft;
        typed();
      }
      return control;
    }

    function suggestions(ctx, kind) {
      if (STATE_LISTS.has(ctx.key) && stateIds) return { kind: "states", names: stateIds };
      if (type !== "definition" && (kind === "tools" || kind === "handlers") && catalog[kind]) {
        return { kind, names: catalog[kind].map((entry) => entry.name) };
      }
      return null;
    }

    function itemNote(ctx, offer, name) {
      if (!offer || name === "") return null;
      if (offer.kind === "states") {
        if (offer.names.includes(name)) return null;
        return el("span", "sf-warning", `${name}: no such state in this definition`);
      }
      const entry = catalog[offer.kind].find((candidate) => candidate.name === name);
      const missing = offer.kind === "tools" ? toolMissing(entry) : entry ? null : "not provided by --hooks";
      if (missing) return el("span", "sf-warning", `${name}: ${missing}`);
      const needs = NEEDS[offer.kind](entry);
      return needs ? el("span", "sf-needs", needs) : null;
    }

    function listField(ctx) {
      const { key, spec } = ctx;
      const offer = suggestions(ctx, key);
      const wrap = el("div", "sf-list-editor");
      const list = el("ol", "sf-list");
      list.dataset.field = ctx.path;
      const start = current[key];
      const items = Array.isArray(start)
        ? start.map((item) => (typeof item === "string" ? item : JSON.stringify(item)))
        : [];
      if (start !== undefined && start !== null && !Array.isArray(start)) {
        ctx.fail(`${ctx.label}: the file holds ${JSON.stringify(start)}, not a list; adding here replaces it`);
      }
      let listId = null;
      if (offer && offer.names.length) {
        listId = `${ctx.id}-choices`;
        const choices = el("datalist");
        choices.id = listId;
        for (const name of offer.names) {
          const option = el("option");
          option.value = name;
          choices.append(option);
        }
        wrap.append(choices);
      }

      const commit = () => {
        const problems = [];
        check(root, spec.inner, items, ctx.label, problems);
        if (problems.length) {
          ctx.hold(problems, items.slice());
          return;
        }
        const fallback = ctx.property.default !== undefined ? ctx.property.default : spec.inner.default;
        if (items.length === 0 && Array.isArray(fallback) && fallback.length === 0) ctx.apply(emptied(key, []));
        else ctx.apply(items.slice());
        drawCatalog();
      };

      const button = (text, action, title) => {
        const node = el("button", `sf-button sf-${action}`, text);
        node.type = "button";
        node.dataset.action = action;
        node.title = title;
        return node;
      };

      const draw = () => {
        list.replaceChildren();
        items.forEach((item, index) => {
          const row = el("li", "sf-item");
          const control = mark(el("input", "sf-input"), `${ctx.path}.${index}`);
          control.type = "text";
          control.value = item;
          if (listId) control.setAttribute("list", listId);
          const note = el("div", "sf-item-note");
          const annotate = () => {
            const made = itemNote(ctx, offer, control.value);
            note.replaceChildren(...(made ? [made] : []));
            const name = control.value;
            if (made && offer && offer.kind === "tools" && !known(name) && typeof o.onUseTool === "function") {
              const declare = button("Declare", "declare", `Declare ${name} in the definition's top-level tools`);
              declare.addEventListener("click", () => {
                useTool(name);
                declare.remove();
              });
              note.append(" ", declare);
            }
          };
          annotate();
          control.addEventListener("input", () => {
            items[index] = control.value;
            annotate();
            commit();
          });
          const up = button("↑", "up", "Move up");
          up.disabled = index === 0;
          up.addEventListener("click", () => {
            [items[index - 1], items[index]] = [items[index], items[index - 1]];
            draw();
            commit();
          });
          const down = button("↓", "down", "Move down");
          down.disabled = index === items.length - 1;
          down.addEventListener("click", () => {
            [items[index + 1], items[index]] = [items[index], items[index + 1]];
            draw();
            commit();
          });
          const remove = button("×", "remove", "Remove");
          remove.addEventListener("click", () => {
            items.splice(index, 1);
            draw();
            commit();
          });
          row.append(control, up, down, remove, note);
          list.append(row);
        });
      };

      const adding = el("div", "sf-add");
      const fresh = mark(el("input", "sf-input sf-new"), `${ctx.path}.new`, ctx.id);
      fresh.type = "text";
      fresh.placeholder =
        offer && offer.kind !== "states" ? `add a name (${offer.kind} --hooks provides below)` : "add…";
      if (listId) fresh.setAttribute("list", listId);
      const add = button("Add", "add", "Add to the list");
      // A tool added here from what the catalog knows is also declared at the top level by the page (onUseTool),
      // so the state does not name a tool the definition lacks; a name the catalog does not know is not declared
      // on its own (a typo would stay in the file unseen): its note offers to declare it.
      const useTool = (name) => {
        if (offer && offer.kind === "tools" && typeof o.onUseTool === "function") o.onUseTool(name);
      };
      const known = (name) =>
        Boolean(offer && offer.kind !== "states" && catalog[offer.kind].some((entry) => entry.name === name));
      const addName = (name) => {
        if (name === "") return;
        items.push(name);
        draw();
        commit();
        if (known(name) && Array.isArray(current[key]) && current[key].includes(name)) useTool(name);
      };
      add.addEventListener("click", () => {
        addName(fresh.value);
        fresh.value = "";
        fresh.focus();
      });
      fresh.addEventListener("keydown", (event) => {
        if (event.key === "Enter") {
          event.preventDefault();
          add.click();
        }
      });
      adding.append(fresh, add);

      const panel = el("ul", "sf-catalog");
      const drawCatalog = () => {
        if (!offer || offer.kind === "states") return;
        panel.dataset.catalog = offer.kind;
        panel.replaceChildren();
        const entriesOf = catalog[offer.kind];
        if (!entriesOf.length) panel.append(el("li", "sf-needs", `--hooks provides no ${offer.kind}`));
        for (const entry of entriesOf) {
          const row = el("li", "sf-catalog-entry");
          row.dataset.name = entry.name;
          row.append(el("code", "sf-name", entry.name));
          if (typeof entry.description === "string" && entry.description) {
            row.append(el("span", "sf-description", ` — ${entry.description}`));
          }
          const needs = NEEDS[offer.kind](entry);
          if (needs) row.append(el("div", "sf-needs", needs));
          if (!items.includes(entry.name)) {
            const use = button("Add", "use", `Add ${entry.name} to this state's ${offer.kind}`);
            use.addEventListener("click", () => addName(entry.name));
            row.append(use);
          }
          panel.append(row);
        }
      };
      const draft = ctx.draft();
      if (Array.isArray(draft)) items.splice(0, items.length, ...draft.map(String));
      draw();
      drawCatalog();
      if (Array.isArray(draft)) commit();
      wrap.append(list, adding);
      if (offer && offer.kind !== "states") ctx.notes.append(panel); // below the error, which is the input's
      return wrap;
    }

    function jsonField(ctx) {
      const { key, property, spec } = ctx;
      const wrap = el("div", "sf-json-editor");
      const control = mark(el("textarea", "sf-json"), ctx.path, ctx.id);
      control.spellcheck = false;
      const value = current[key];
      control.value = value === undefined ? "" : JSON.stringify(value, null, 2);
      control.rows = Math.min(16, Math.max(3, control.value.split("\n").length + 1));
      const fallback = property.default !== undefined ? property.default : spec.inner.default;
      const kinds = describeSchema(root, property);
      control.placeholder =
        fallback !== undefined ? `JSON (${kinds}); default: ${JSON.stringify(fallback)}` : `JSON (${kinds})`;
      const isChecks = key === "checks" && type === "State";
      // a card per item: conditions (one type) and a state's checks (a kind chosen among the schema's)
      const cardsOf = key === "conditions" ? itemsType(property) : isChecks ? itemsUnion(property) : null;
      const cards = cardsOf && (value === undefined || Array.isArray(value)) ? itemCards(ctx, cardsOf, control) : null;
      const panel = el("div", "sf-catalog-notes");

      const isTools = key === "tools" && type === "definition";
      // Beside the field, one block per note (never run together): the python checks --hooks lacks, then what it
      // provides, each with its action (checks: Add one; top-level tools: Declare one, with the minimal
      // declaration the loader accepts, {}, its description and parameters then coming from the registered code).
      const noteCatalog = (given) => {
        panel.replaceChildren();
        if (isChecks && catalog.checks) noteChecks(given);
        if (isTools && catalog.tools) noteTools(given);
      };
      const offerList = (kind, heading, list, actionOf) => {
        if (!list.length) return;
        const offered = el("ul", "sf-catalog");
        offered.dataset.catalog = kind;
        for (const entry of list) {
          const row = el("li", "sf-catalog-entry");
          row.dataset.name = entry.name;
          row.append(el("code", "sf-name", entry.name));
          if (typeof entry.description === "string" && entry.description) {
            row.append(el("span", "sf-description", ` — ${entry.description}`));
          }
          const needs = NEEDS[kind](entry, kind === "tools");
          if (needs) row.append(el("div", "sf-needs", needs));
          const action = actionOf(entry);
          if (action) row.append(action);
          offered.append(row);
        }
        panel.append(el("div", "sf-needs sf-catalog-heading", heading), offered);
      };
      const amend = (entry, what, empty, isShape, change) => {
        const parsed = control.value.trim() === "" ? { value: empty } : parseJson(control.value);
        // text not applied yet stays the author's to fix or clear: an Add never builds on it (nor applies it)
        if (invalid.has(ctx.path) || parsed.error || !isShape(parsed.value)) {
          ctx.hold(`${ctx.label}: fix the JSON first (${what}) to add ${entry.name}`, control.value);
          return;
        }
        control.value = JSON.stringify(change(parsed.value), null, 2);
        accept(false);
      };
      const noteChecks = (checks) => {
        for (const item of Array.isArray(checks) ? checks : []) {
          if (isObject(item) && item.kind === "python" && typeof item.name === "string") {
            const provided = catalog.checks.find((entry) => entry.name === item.name);
            if (!provided) panel.append(el("div", "sf-warning", `check ${item.name}: not provided by --hooks`));
          }
        }
        offerList("checks", "Checks --hooks provides:", catalog.checks, (entry) => {
          const use = button("Add", "use", `Add a python check named ${entry.name}`);
          use.addEventListener("click", () =>
            amend(entry, "a list of checks", [], Array.isArray, (list) =>
              list.concat([{ kind: "python", name: entry.name }]),
            ),
          );
          return use;
        });
      };
      const noteTools = (tools) => {
        const declared = isObject(tools) ? tools : {};
        offerList(
          "tools",
          "Tools --hooks provides:",
          catalog.tools.filter((entry) => entry.registered !== false),
          (entry) => {
            if (own(declared, entry.name)) return el("div", "sf-note sf-declared", "declared here");
            const declare = button("Declare", "declare", `Declare ${entry.name} here (as {}: its code gives the rest)`);
            declare.addEventListener("click", () =>
              amend(entry, "an object of tools by name", {}, isObject, (object) =>
                Object.assign({}, object, { [entry.name]: {} }),
              ),
            );
            return declare;
          },
        );
      };
      function button(text, action, title) {
        const node = el("button", `sf-button sf-${action}`, text);
        node.type = "button";
        node.dataset.action = action;
        node.title = title;
        return node;
      }

      // restoring: the JSON box gets its draft back on render (the cards then keep their own drafts).
      // The cards only ever show and edit the applied value: text typed here that is not applied (not JSON, or
      // JSON the schema refuses) locks them on the applied value, so nothing typed in a card can apply, or be
      // mixed with, the box's draft (a card edit would otherwise save the refused text with it).
      const accept = (restoring) => {
        const text = control.value;
        control.removeAttribute("aria-invalid");
        if (text.trim() === "") {
          ctx.apply(emptied(key, null));
          noteCatalog([]);
          if (cards) {
            cards.unlock();
            cards.redraw([]);
          }
          return;
        }
        const parsed = parseJson(text);
        const problems = [];
        if (parsed.error) problems.push(`${ctx.label}: ${parsed.error}`);
        else check(root, property, parsed.value, ctx.label, problems);
        if (problems.length) {
          control.setAttribute("aria-invalid", "true");
          ctx.hold(problems, text);
          if (cards) cards.lock();
          return;
        }
        ctx.apply(parsed.value);
        noteCatalog(parsed.value);
        if (cards) {
          cards.unlock();
          (restoring === true ? cards.draw : cards.redraw)(current[key]);
        }
      };
      control.addEventListener("input", () => accept(false));
      noteCatalog(value);
      ctx.notes.append(panel);
      const draft = ctx.draft();
      if (typeof draft === "string" && draft.trim() !== "") {
        control.value = draft;
        control.rows = Math.min(16, Math.max(3, draft.split("\n").length + 1));
        accept(true);
      }
      if (cards) {
        wrap.append(cards.note, cards.element, el("small", "sf-help sf-as-json", "All of them as JSON:"));
      }
      wrap.append(control);
      return wrap;
    }

    // The $defs name of an array's items (conditions: "Condition"), when they are one $ref'd object type.
    function itemsType(property) {
      const node = deref(root, property);
      const ref = node.items && node.items.$ref;
      if (node.type !== "array" || typeof ref !== "string" || !ref.startsWith("#/$defs/")) return null;
      const name = ref.slice("#/$defs/".length);
      return root.$defs && isObject(root.$defs[name]) && deref(root, root.$defs[name]).type === "object" ? name : null;
    }

    // An array whose items are one of several $defs types told apart by a tag (a state's checks, by kind):
    // {tag, mapping: {tag value: $defs name}, name (an item's, e.g. "Check")}.
    function itemsUnion(property) {
      const node = deref(root, property);
      const items = node.type === "array" && node.items ? deref(root, node.items) : null;
      const tag = items && items.discriminator;
      if (!tag || typeof tag.propertyName !== "string" || !isObject(tag.mapping)) return null;
      const mapping = {};
      for (const [choice, ref] of Object.entries(tag.mapping)) {
        const name = typeof ref === "string" && ref.startsWith("#/$defs/") ? ref.slice("#/$defs/".length) : null;
        if (!name || !root.$defs || !isObject(root.$defs[name])) return null;
        mapping[choice] = name;
      }
      const title = typeof node.title === "string" ? node.title : "";
      return { tag: tag.propertyName, mapping, name: title.replace(/s$/, "") || "Item" };
    }

    // The items of a list one by one, each a form of its own (conditions: description, requires_context_keys as
    // a list, logic as JSON; checks: their kind as a choice, then that kind's fields), kept in step with the JSON
    // box below them: a change in either redraws the other. of: a $defs name, or itemsUnion's answer.
    function itemCards(ctx, of, control) {
      const union = typeof of === "string" ? null : of;
      const itemType = union ? union.name : of;
      // a fieldset: while the JSON box holds text typed there and not applied, the cards are disabled and show
      // the applied value (an edit there would overwrite that text, or apply it), with a note saying why
      const element = el("fieldset", "sf-cards");
      element.dataset.cards = ctx.path;
      const note = el(
        "div",
        "sf-warning sf-cards-locked",
        "The JSON box below holds text not applied yet: fix it or clear it to edit these one by one.",
      );
      note.dataset.locked = ctx.path;
      note.hidden = true;
      let locked = false;
      let items = [];
      const handles = [];
      const commit = () => {
        if (locked) return; // never over the box's draft (the fieldset is disabled: this is the belt to it)
        const problems = [];
        check(root, ctx.property, items, ctx.label, problems);
        if (problems.length) {
          control.value = JSON.stringify(items, null, 2);
          control.setAttribute("aria-invalid", "true");
          ctx.hold(problems, control.value);
          return;
        }
        ctx.apply(items.length ? items : emptied(ctx.key, []));
        control.removeAttribute("aria-invalid");
        control.value = own(current, ctx.key) ? JSON.stringify(current[ctx.key], null, 2) : "";
      };
      const button = (text, action, title, index) => {
        const node = el("button", `sf-button sf-${action}`, text);
        node.type = "button";
        node.dataset.action = action;
        node.title = title;
        if (index !== undefined) node.dataset.index = String(index);
        return node;
      };
      let drawing = false;
      const draw = (value) => {
        drawing = true;
        items = Array.isArray(value) ? clone(value) : [];
        handles.length = 0;
        element.replaceChildren();
        items.forEach((item, index) => {
          const card = el("div", "sf-card");
          card.dataset.index = String(index);
          const head = el("div", "sf-card-head");
          head.append(el("span", "sf-card-title", `${itemType} ${index + 1}`));
          const up = button("↑", "up", "Move up", index);
          up.disabled = index === 0;
          up.addEventListener("click", () => {
            [items[index - 1], items[index]] = [items[index], items[index - 1]];
            moveDrafts(ctx.path, (i) => (i === index ? index - 1 : i === index - 1 ? index : i));
            draw(items);
            commit();
          });
          const down = button("↓", "down", "Move down", index);
          down.disabled = index === items.length - 1;
          down.addEventListener("click", () => {
            [items[index + 1], items[index]] = [items[index], items[index + 1]];
            moveDrafts(ctx.path, (i) => (i === index ? index + 1 : i === index + 1 ? index : i));
            draw(items);
            commit();
          });
          const remove = button("×", "remove", `Remove this ${itemType.toLowerCase()}`, index);
          remove.addEventListener("click", () => {
            items.splice(index, 1);
            moveDrafts(ctx.path, (i) => (i === index ? null : i > index ? i - 1 : i));
            draw(items);
            commit();
          });
          head.append(up, down, remove);
          const body = el("div", "sf-card-body");
          card.append(head, body);
          const itemForm = (formType, omitted) => {
            const handle = render(formBox, {
              schema: root,
              type: formType,
              value: item,
              omit: omitted,
              catalog: o.catalog,
              stateIds: o.stateIds,
              prefix: `${ctx.path}.${index}.`,
              drafts: drafts || undefined,
              onInvalid: () => {
                if (!drawing) notify();
              },
              onUseTool: o.onUseTool,
              onChange: (changed) => {
                if (locked) return;
                items[index] = changed;
                commit();
              },
            });
            handles.push(handle);
          };
          const formBox = el("div", "sf-card-form");
          if (!isObject(item)) {
            body.append(el("div", "sf-warning", `not an object: edit ${itemType} ${index + 1} as JSON below`));
          } else if (union) {
            const chosen = union.mapping[item[union.tag]];
            body.append(
              kindField(ctx, union, items, index, () => {
                draw(items);
                commit();
              }),
              formBox,
            );
            if (typeof item[union.tag] === "string" && own(union.mapping, item[union.tag])) {
              itemForm(chosen, [union.tag]);
            } else {
              formBox.append(el("div", "sf-help", `Choose the kind of this ${itemType.toLowerCase()} first.`));
            }
          } else {
            body.append(formBox);
            itemForm(itemType, undefined);
          }
          element.append(card);
        });
        const add = button(`Add a ${itemType.toLowerCase()}`, "add-item", `Add a ${itemType.toLowerCase()}`);
        add.addEventListener("click", () => {
          items.push({});
          draw(items);
          commit();
        });
        element.append(add);
        drawing = false;
        notify(); // the cards drawn anew: the fields inside them that hold text may have changed
      };
      // the JSON box replaced the whole list: what the old cards held unapplied no longer fits them
      const redraw = (value) => {
        moveDrafts(ctx.path, () => null);
        draw(value);
      };
      // the box holds text not applied: the cards go back to the applied value (what they held of their own
      // that was not applied is in the box's text, still there to fix) and take no edit until unlock
      const lock = () => {
        if (locked) return;
        draw(current[ctx.key]);
        locked = true;
        element.disabled = true;
        note.hidden = false;
      };
      const unlock = () => {
        locked = false;
        element.disabled = false;
        note.hidden = true;
      };
      draw(current[ctx.key]);
      nested.set(ctx.path, () => handles.flatMap((handle) => handle.invalid()));
      return { element, note, draw, redraw, lock, unlock };
    }

    // A card's kind (a check's "kind"): a select of the schema's kinds, each with its type's description. A new
    // kind keeps the fields the new type also has (description, on) and drops the others.
    function kindField(ctx, union, items, index, changed) {
      const item = items[index];
      const path = `${ctx.path}.${index}.${union.tag}`;
      const box = el("div", `sf-field sf-kind-enum sf-card-kind`);
      box.dataset.key = union.tag;
      const id = `sf${number}-${path.replace(/[^A-Za-z0-9_-]/g, "_")}`;
      const label = el("label", "sf-label", humanize(union.tag));
      label.htmlFor = id;
      const head = el("div", "sf-head");
      head.append(label);
      box.append(head);
      const control = mark(el("select", "sf-select"), path, id);
      const given = item[union.tag];
      if (typeof given !== "string" || !own(union.mapping, given)) {
        const unset = el(
          "option",
          null,
          given === undefined ? "(choose a kind)" : `${JSON.stringify(given)} (not a kind)`,
        );
        unset.value = "";
        unset.dataset.unset = "1";
        control.append(unset);
      }
      const typeOfKind = (choice) => deref(root, root.$defs[union.mapping[choice]]);
      for (const choice of Object.keys(union.mapping)) {
        const option = el("option", null, choice);
        option.value = choice;
        const described = typeOfKind(choice).description;
        if (typeof described === "string") option.title = described;
        control.append(option);
      }
      control.value = typeof given === "string" && own(union.mapping, given) ? given : "";
      const help = el("small", "sf-help", control.value ? typeOfKind(control.value).description || "" : "");
      help.id = `${id}-help`;
      control.setAttribute("aria-describedby", help.id);
      control.addEventListener("change", () => {
        const next = control.value;
        if (!own(union.mapping, next)) return;
        const fields = Object.keys(typeOfKind(next).properties || {});
        const out = {};
        if (!own(item, union.tag)) out[union.tag] = next;
        for (const name of Object.keys(item)) {
          if (name === union.tag) out[name] = next;
          else if (fields.includes(name)) out[name] = item[name];
        }
        items[index] = out;
        dropDrafts(`${ctx.path}.${index}`); // the fields of the old kind are gone
        changed();
      });
      box.append(control, help);
      return box;
    }

    function renameField(property) {
      const path = `${prefix}id`;
      const box = el("div", "sf-field sf-kind-string sf-rename");
      box.dataset.key = "id";
      const id = `sf${number}-${path.replace(/[^A-Za-z0-9_-]/g, "_")}`;
      const label = el("label", "sf-label", property.title || "Id");
      label.htmlFor = id;
      const head = el("div", "sf-head");
      head.append(label);
      box.append(head);
      const help = "The state's id (its key in states). Renaming it renames every reference to it.";
      box.title = property.description || help;
      box.append(el("small", "sf-help", `${property.description || ""} ${help}`.trim()));
      const control = mark(el("input", "sf-input"), path, id);
      control.type = "text";
      const currentId = typeof o.id === "string" ? o.id : typeof original.id === "string" ? original.id : "";
      control.value = currentId;
      control.title = box.title;
      const error = el("div", "sf-error");
      error.setAttribute("role", "alert");
      error.hidden = true;
      const problemsOf = (text) => {
        const problems = [];
        check(root, property, text, "id", problems);
        if (stateIds && text !== currentId && stateIds.includes(text)) problems.push(`id: ${text} is already a state`);
        return problems;
      };
      const show = (problems) => {
        error.replaceChildren(...problems.map((problem) => el("div", null, problem)));
        error.hidden = problems.length === 0;
        box.classList.toggle("sf-invalid", problems.length > 0);
        if (problems.length) hold(path, control.value);
        else release(path);
      };
      control.addEventListener("input", () => show(problemsOf(control.value)));
      const draft = draftOf(path);
      if (typeof draft === "string") {
        control.value = draft;
        show(problemsOf(draft));
      }
      // a rename rewrites references all over the definition: done once, when the author is done typing
      control.addEventListener("change", () => {
        const problems = problemsOf(control.value);
        show(problems);
        if (!problems.length && control.value !== currentId) o.onRename(control.value);
      });
      box.append(control, error);
      return box;
    }
  }

  global.SchemaForms = { render, validate, parseJson };
})(window);
