/*
 * The page of `llm-fsm edit FILE`: the definition as a graph you draw (cytoscape), the selected part in a form
 * from the schema (forms.js), the problems of `validate --strict` as you go, saving, undo, and a chat beside it.
 *
 * The definition is one JSON value (`doc`). Every change makes a new value, pushed on the undo stack, then
 * drawn again and checked (POST /api/check, debounced): the server renders the text the save would write
 * and checks that text, so line:column are the saved file's. The page never builds the file's text itself.
 *
 * Every text from the file or the server is inserted as text (textContent, option labels, canvas labels):
 * nothing here parses HTML. The page's policy runs scripts from this server only; there is no inline script.
 */
(function () {
  "use strict";

  const ID_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;
  const DEFAULT_PRIORITY = 100; // the schema's default for a transition's priority
  const CHECK_DELAY_MS = 150;
  const FONT_SIZE = 12;
  const EDGE_FONT_SIZE = 11;
  const FONT_FAMILY = "Helvetica, Arial, sans-serif";
  const ANY = "any"; // the cytoscape id of the "any state" node global transitions leave from
  const BACK = "back"; // the node `"$return"` transitions lead to (back where the conversation came from)
  const RETURN = "$return";

  const $ = (id) => document.getElementById(id);

  // -- what the page holds ------------------------------------------------------------------------

  const page = {
    doc: null, // the edited definition (a JSON value), or null while the file is not JSON
    file: null, // GET /api/file's answer
    sha: "", // the sha of the file's bytes the page read or last saved
    savedJson: null, // JSON.stringify of the value on disk (what "unsaved" compares with)
    undo: [],
    redo: [],
    lastFormEdit: null, // {key, at}: typing in one field of one form is one undo step
    version: 0, // bumped on every change of doc
    checkedVersion: -1,
    checking: 0,
    checkTimer: null,
    problems: [],
    selection: { kind: "definition" },
    positions: {}, // author-moved states: id -> {x, y}, as /api/layout keeps them
    rankDir: "auto", // TB, LR, or auto: whichever of the two shows the graph larger in its pane
    chat: null, // {state, visited: [ids], ended, startedJson}
    structure: "", // what the graph was last laid out for (ids, edges and labels)
    // Text typed in a form field that is not valid yet (forms.js keeps it and does not apply it), per element:
    // elementKey -> {selection, fields: forms.js's drafts object, paths: the fields holding such text}.
    drafts: {},
    shownKey: null, // the element whose form is shown (a new one scrolls the form pane to the top)
    layoutPending: false, // moved positions (or the direction) not written yet: they wait for the save
    noticeKind: "", // what the notice says: "new" (a new file), "" (anything else)
  };

  // -- the definition's shape (states as an object keyed by id, or as a list with ids) --------------

  function statesOf(doc) {
    const states = doc && doc.states;
    if (Array.isArray(states)) {
      return states.filter((s) => s && typeof s === "object" && typeof s.id === "string").map((s) => [s.id, s]);
    }
    if (states && typeof states === "object") return Object.entries(states).filter(([, s]) => s && typeof s === "object");
    return [];
  }

  function stateIds(doc) {
    return statesOf(doc).map(([id]) => id);
  }

  function stateOf(doc, id) {
    const found = statesOf(doc).find(([sid]) => sid === id);
    return found ? found[1] : undefined;
  }

  function transitionsOf(state) {
    return state && Array.isArray(state.transitions) ? state.transitions : [];
  }

  function globalsOf(doc) {
    return doc && Array.isArray(doc.global_transitions) ? doc.global_transitions : [];
  }

  function priorityOf(transition) {
    return transition && typeof transition.priority === "number" ? transition.priority : DEFAULT_PRIORITY;
  }

  /** The transitions of a state in the order the runtime prefers them: priority, then place in the list. */
  function inPriorityOrder(transitions) {
    return transitions.map((t, index) => ({ t, index })).sort((a, b) => priorityOf(a.t) - priorityOf(b.t) || a.index - b.index);
  }

  function isTerminal(state) {
    return transitionsOf(state).length === 0;
  }

  function shorten(text, most) {
    const flat = String(text).replace(/\s+/g, " ").trim();
    return flat.length > most ? flat.slice(0, most - 1) + "…" : flat;
  }

  /** A JsonLogic rule in a few words: `{"==": [{"var": "x"}, 1]}` -> `x == 1`. */
  function logicText(rule) {
    if (rule === null || typeof rule !== "object") return JSON.stringify(rule);
    if (Array.isArray(rule)) return rule.map(logicText).join(", ");
    const keys = Object.keys(rule);
    if (keys.length !== 1) return JSON.stringify(rule);
    const op = keys[0];
    const args = Array.isArray(rule[op]) ? rule[op] : [rule[op]];
    if (op === "var") return String(args[0]);
    if (op === "!" || op === "!!") return op + logicText(args[0]);
    if (args.length === 2) return `${logicText(args[0])} ${op} ${logicText(args[1])}`;
    return `${op}(${args.map(logicText).join(", ")})`;
  }

  function conditionText(condition) {
    if (!condition || typeof condition !== "object") return "";
    if (typeof condition.description === "string" && condition.description.trim()) return condition.description;
    const keys = Array.isArray(condition.requires_context_keys) ? condition.requires_context_keys : [];
    if (keys.length) return "needs " + keys.join(", ");
    if (condition.logic !== undefined) return logicText(condition.logic);
    return "";
  }

  /**
   * An edge's label: `priority · short condition` (`10 · needs email`, or the condition's description); with no
   * conditions, the transition's own description (when the model takes it), else the priority alone.
   */
  function transitionLabel(transition) {
    const conditions = Array.isArray(transition.conditions) ? transition.conditions : [];
    let text = conditions.length ? conditionText(conditions[0]) : "";
    if (!conditions.length && typeof transition.description === "string") text = transition.description;
    if (conditions.length > 1) text += ` +${conditions.length - 1}`;
    const head = String(priorityOf(transition));
    return text ? `${head} · ${shorten(text, 40)}` : head;
  }

  // -- edits (each returns nothing: it changes the draft it is given) ------------------------------

  function addState(draft, id) {
    if (Array.isArray(draft.states)) {
      draft.states.push({ id });
    } else {
      if (!draft.states || typeof draft.states !== "object") putKey(draft, "states", {}, "definition");
      draft.states[id] = {};
    }
    if (typeof draft.initial_state !== "string" || !draft.initial_state) putKey(draft, "initial_state", id, "definition");
  }

  function nextPriority(transitions) {
    if (!transitions.length) return DEFAULT_PRIORITY;
    return Math.max(...transitions.map(priorityOf)) + 10;
  }

  function addTransition(draft, source, target) {
    if (source === ANY) {
      if (!Array.isArray(draft.global_transitions)) putKey(draft, "global_transitions", [], "definition");
      draft.global_transitions.push({ target_state: target, priority: nextPriority(draft.global_transitions) });
      return { kind: "global_transition", index: draft.global_transitions.length - 1 };
    }
    const state = stateOf(draft, source);
    if (!Array.isArray(state.transitions)) putKey(state, "transitions", [], "State");
    state.transitions.push({ target_state: target, priority: nextPriority(state.transitions) });
    return { kind: "transition", state: source, index: state.transitions.length - 1 };
  }

  /** Remove state `id` and every transition to it; it leaves the global transitions' `except_states` too. */
  function deleteState(draft, id) {
    const before = structuredClone(draft);
    if (Array.isArray(draft.states)) draft.states = draft.states.filter((s) => !(s && s.id === id));
    else if (draft.states) delete draft.states[id];
    for (const [, state] of statesOf(draft)) {
      if (Array.isArray(state.transitions)) state.transitions = state.transitions.filter((t) => t.target_state !== id);
    }
    if (Array.isArray(draft.global_transitions)) {
      draft.global_transitions = draft.global_transitions.filter((t) => t.target_state !== id);
      for (const g of draft.global_transitions) {
        if (Array.isArray(g.except_states)) g.except_states = g.except_states.filter((s) => s !== id);
      }
    }
    dropEmptied(draft, before);
  }

  function transitionsInto(doc, id) {
    let count = 0;
    for (const [sid, state] of statesOf(doc)) {
      if (sid !== id) count += transitionsOf(state).filter((t) => t.target_state === id).length;
    }
    return count + globalsOf(doc).filter((t) => t.target_state === id).length;
  }

  /**
   * Rename state `from` to `to` and every reference with it: the key (or `id`), `initial_state`, each
   * transition's and global transition's `target_state`, the global transitions' `except_states` and the
   * states' `fallback_state` (every field of the schema that holds a state id).
   */
  function renameState(draft, from, to) {
    if (Array.isArray(draft.states)) {
      for (const s of draft.states) if (s && s.id === from) s.id = to;
    } else if (draft.states) {
      const renamed = {};
      for (const [key, value] of Object.entries(draft.states)) renamed[key === from ? to : key] = value;
      draft.states = renamed;
    }
    if (draft.initial_state === from) draft.initial_state = to;
    for (const [, state] of statesOf(draft)) {
      for (const t of transitionsOf(state)) if (t.target_state === from) t.target_state = to;
      if (state.fallback_state === from) state.fallback_state = to;
    }
    for (const g of globalsOf(draft)) {
      if (g.target_state === from) g.target_state = to;
      if (Array.isArray(g.except_states)) g.except_states = g.except_states.map((s) => (s === from ? to : s));
    }
  }

  /**
   * Give the transitions `order` (indexes into the list) rising priorities, reusing the numbers they have:
   * the same set of numbers in the new order, each raised just enough to stay above the one before when
   * numbers repeat. A transition that had no priority and gets the default keeps having none.
   */
  function reorder(transitions, order) {
    const numbers = order.map((i) => priorityOf(transitions[i])).sort((a, b) => a - b);
    let previous = -Infinity;
    order.forEach((index, place) => {
      const wanted = Math.max(numbers[place], previous + 1);
      previous = wanted;
      const t = transitions[index];
      if (priorityOf(t) !== wanted || (typeof t.priority !== "number" && wanted !== DEFAULT_PRIORITY)) t.priority = wanted;
    });
  }

  function idProblem(id, doc, except) {
    if (!id) return "type an id";
    if (!ID_PATTERN.test(id)) return "an id is letters, digits and underscores, not starting with a digit";
    if (id !== except && stateIds(doc).includes(id)) return `there is already a state '${id}'`;
    return "";
  }

  // -- where new keys go -----------------------------------------------------------------------------

  /** The schema's property names of `type` ("definition" or a $defs name), in the schema's order. */
  function schemaOrder(type) {
    const schema = page.file && page.file.schema;
    if (!schema || typeof schema !== "object") return [];
    const node = type === "definition" ? schema : (schema.$defs || {})[type];
    return node && node.properties && typeof node.properties === "object" ? Object.keys(node.properties) : [];
  }

  /**
   * Set `target[key]`; a key `target` does not hold yet goes at its place in the schema's order of `type`,
   * right after the last key already there that the schema puts before it (a new file reads name, description,
   * initial_state, ..., states). The keys already there are never reordered: the save keeps the file's order.
   */
  function putKey(target, key, value, type) {
    if (Object.prototype.hasOwnProperty.call(target, key)) {
      target[key] = value;
      return;
    }
    const order = schemaOrder(type);
    const rank = order.indexOf(key);
    const entries = Object.entries(target);
    let at = entries.length;
    if (rank >= 0) {
      let after = -1;
      entries.forEach(([k], i) => {
        const r = order.indexOf(k);
        if (r >= 0 && r < rank) after = i;
      });
      if (after >= 0) at = after + 1;
      else {
        const first = entries.findIndex(([k]) => order.indexOf(k) > rank);
        if (first >= 0) at = first;
      }
    }
    entries.splice(at, 0, [key, value]);
    for (const [k] of entries) delete target[k];
    for (const [k, v] of entries) target[k] = v;
  }

  function holds(object, key) {
    return Boolean(object) && typeof object === "object" && Object.prototype.hasOwnProperty.call(object, key);
  }

  /** The definition as the file on disk holds it (null for a new file or one that is not JSON). */
  function savedValue() {
    return page.savedJson ? JSON.parse(page.savedJson) : null;
  }

  /**
   * A list the page emptied (the last transition deleted, ...) goes with its key when the saved file did not
   * hold that key: an empty list means the same as none, and the file should not grow a `"transitions": []`
   * it never had. `before` is the definition before the edit (only lists it held non-empty are dropped).
   */
  function dropEmptied(draft, before) {
    const saved = savedValue();
    const emptied = (now, then, key) => Array.isArray(now[key]) && !now[key].length && then && Array.isArray(then[key]) && then[key].length > 0;
    for (const [id, state] of statesOf(draft)) {
      if (emptied(state, stateOf(before, id), "transitions") && !holds(saved && stateOf(saved, id), "transitions")) delete state.transitions;
    }
    globalsOf(draft).forEach((g, index) => {
      const then = globalsOf(before).find((b) => b && g && b.target_state === g.target_state && b.priority === g.priority);
      if (g && emptied(g, then, "except_states") && !holds(globalsOf(saved)[index], "except_states")) delete g.except_states;
    });
    if (emptied(draft, before, "global_transitions") && !holds(saved, "global_transitions")) delete draft.global_transitions;
  }

  // -- changes, undo, redo ------------------------------------------------------------------------

  /**
   * Apply `edit` to a copy of the definition and make it the current one. `options.formKey` names the form
   * field the change came from: consecutive changes of one field are one undo step, and the form is not
   * drawn again under the author's cursor.
   */
  function change(edit, options = {}) {
    if (page.doc === null) return;
    const draft = structuredClone(page.doc);
    const result = edit(draft);
    const before = JSON.stringify(page.doc);
    if (JSON.stringify(draft) === before) return result;
    const now = Date.now();
    const merge = options.withLast
      ? Boolean(page.lastFormEdit) && page.undo.length > 0
      : options.formKey && page.lastFormEdit && page.lastFormEdit.key === options.formKey && now - page.lastFormEdit.at < 1500;
    if (!merge) page.undo.push({ doc: page.doc, layout: options.layout || null, rename: options.rename || null });
    if (!options.withLast) page.lastFormEdit = options.formKey ? { key: options.formKey, at: now } : null;
    page.redo = [];
    setDoc(draft, { keepForm: Boolean(options.formKey), select: options.select });
    return result;
  }

  function setDoc(doc, { keepForm = false, select = null } = {}) {
    page.doc = doc;
    page.version += 1;
    if (select) page.selection = select;
    if (!selectionExists(page.selection)) page.selection = { kind: "definition" };
    for (const [key, entry] of Object.entries(page.drafts)) if (!selectionExists(entry.selection)) delete page.drafts[key];
    draw();
    if (!keepForm) showSelection();
    else refreshTransitionList();
    markChat();
    chatSawEdit(); // a running chat talks to the definition as it was: offer to restart it
    showSaveState();
    scheduleCheck();
    if (page.layoutPending && !unsaved()) writeLayout(); // back to the saved definition (undo): its ids again
  }

  // An undo step is {doc: the definition before the change, layout: null or [from, to, at], rename: null or
  // [from, to]}: a rename or a delete also moves a kept position (from one id to another, or to null), and a
  // rename the chat's current state; undo and redo move them back and forth.
  function undo() {
    if (!page.undo.length) return;
    const step = page.undo.pop();
    page.redo.push({ doc: page.doc, layout: step.layout, rename: step.rename });
    if (step.layout) movePosition(step.layout[1], step.layout[0], step.layout[2]);
    if (step.rename) chatRenamed(step.rename[1], step.rename[0]);
    page.lastFormEdit = null;
    setDoc(step.doc);
    if (step.layout) saveLayout();
  }

  function redo() {
    if (!page.redo.length) return;
    const step = page.redo.pop();
    page.undo.push({ doc: page.doc, layout: step.layout, rename: step.rename });
    if (step.layout) movePosition(step.layout[0], step.layout[1], step.layout[2]);
    if (step.rename) chatRenamed(step.rename[0], step.rename[1]);
    page.lastFormEdit = null;
    setDoc(step.doc);
    if (step.layout) saveLayout();
  }

  /**
   * The kept position of state `from` becomes `to`'s (to null: forgotten; from null: `at` is put back). The
   * caller writes the side file (saveLayout) once the definition has changed too.
   */
  function movePosition(from, to, at) {
    const position = from === null ? at : page.positions[from];
    if (!position) return;
    if (from !== null) delete page.positions[from];
    if (to !== null) page.positions[to] = position;
  }

  function unsaved() {
    return page.doc !== null && JSON.stringify(page.doc) !== page.savedJson;
  }

  // -- text typed but not applied yet ---------------------------------------------------------------

  function draftsOf(selection) {
    const key = elementKey(selection) || "d";
    if (!page.drafts[key]) page.drafts[key] = { selection: structuredClone(selection), fields: {}, paths: [] };
    return page.drafts[key];
  }

  function setPending(selection, paths) {
    const entry = draftsOf(selection);
    const now = Array.isArray(paths) ? [...new Set(paths.map(String))] : [];
    if (JSON.stringify(now) === JSON.stringify(entry.paths)) return;
    entry.paths = now;
    showSaveState();
  }

  /** The fields holding text not applied yet: [{selection, path}], the shown form's first. */
  function pendingFields() {
    const out = [];
    for (const entry of Object.values(page.drafts)) {
      if (!selectionExists(entry.selection)) continue;
      for (const path of entry.paths) out.push({ selection: entry.selection, path });
    }
    return out;
  }

  function elementName(selection) {
    if (selection.kind === "state") return `state ${selection.state}`;
    if (selection.kind === "transition") {
      const t = transitionsOf(stateOf(page.doc, selection.state))[selection.index];
      return `transition ${selection.state} → ${t ? t.target_state : "?"}`;
    }
    if (selection.kind === "global_transition") {
      const t = globalsOf(page.doc)[selection.index];
      return `global transition → ${t ? t.target_state : "?"}`;
    }
    return "definition";
  }

  /**
   * Drafts follow their element: `map(selection)` gives the element's new selection (a rename, a transition
   * moved up the list by a delete), or null when it is gone (its text goes with it).
   */
  function rekeyDrafts(map) {
    const old = page.drafts;
    page.drafts = {};
    for (const entry of Object.values(old)) {
      const selection = map(entry.selection);
      if (!selection) continue;
      entry.selection = selection;
      page.drafts[elementKey(selection) || "d"] = entry;
    }
  }

  /** Go to a field holding text not applied yet: its element's form, the field focused. */
  function showField(selection, path) {
    pick(selection);
    const control = [...$("form").querySelectorAll("[data-field]")].find((node) => node.dataset.field === path);
    if (!control) return;
    control.scrollIntoView({ block: "center" });
    if (typeof control.focus === "function") control.focus();
  }

  function showSaveState() {
    const dirty = unsaved();
    const pending = page.doc === null ? [] : pendingFields();
    const state = $("save-state");
    if (page.doc === null && page.file && page.file.gone) {
      state.textContent = "not on disk: nothing to save";
      state.className = "broken";
    } else if (page.doc === null) {
      state.textContent = "not JSON: nothing to edit";
      state.className = "broken";
    } else if (pending.length) {
      const n = pending.length;
      state.textContent = `unsaved: ${n} field${n === 1 ? " holds" : "s hold"} text not applied yet`;
      state.className = "unsaved";
    } else {
      state.textContent = dirty ? "unsaved" : "saved";
      state.className = dirty ? "unsaved" : "saved";
    }
    document.title = `${dirty || pending.length ? "* " : ""}${page.file ? page.file.name : ""} · llm-fsm edit`;
    $("undo").disabled = !page.undo.length;
    $("redo").disabled = !page.redo.length;
    $("save").disabled = page.doc === null;
  }

  // -- talking to the server ----------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, body) {
      const error = (body && body.error) || {};
      super(error.message || `the editor answered ${status}`);
      this.status = status;
      this.code = error.code || "";
      this.body = body;
    }
  }

  async function api(path, body) {
    const init = body === undefined
      ? { method: "GET", credentials: "same-origin" }
      : { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
    const response = await fetch(path, init);
    let answer = null;
    try {
      answer = await response.json();
    } catch (_) {
      answer = null;
    }
    if (!response.ok) throw new ApiError(response.status, answer);
    return answer;
  }

  /** Say something above the graph; `links` are [{text, go}] shown as buttons after it. */
  function notice(text, { offerEmpty = false, links = [], kind = "" } = {}) {
    $("notice-text").textContent = text;
    $("start-empty").hidden = !offerEmpty;
    const list = $("notice-links");
    clear(list);
    for (const link of links) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "link";
      button.textContent = link.text;
      button.addEventListener("click", link.go);
      list.appendChild(button);
    }
    list.hidden = !links.length;
    page.noticeKind = kind;
    $("notice").hidden = false;
  }

  function hideNotice() {
    $("notice").hidden = true;
    page.noticeKind = "";
  }

  // -- the graph ----------------------------------------------------------------------------------

  let cy = null;
  let handles = null;
  const measure = document.createElement("canvas").getContext("2d");

  function textWidth(text, size) {
    measure.font = `${size}px ${FONT_FAMILY}`;
    return Math.max(0, ...String(text).split("\n").map((line) => measure.measureText(line).width));
  }

  const LABEL_WIDTH = 130; // an edge label wider than this is broken into lines (a narrower graph, larger on screen)

  /** `text` broken at spaces into lines no wider than LABEL_WIDTH (a longer word keeps its own line). */
  function wrapped(text) {
    const lines = [];
    for (const word of String(text).split(" ")) {
      const last = lines.length ? lines[lines.length - 1] : null;
      if (last !== null && textWidth(last + " " + word, EDGE_FONT_SIZE) <= LABEL_WIDTH) lines[lines.length - 1] = last + " " + word;
      else lines.push(word);
    }
    return lines.join("\n");
  }

  function stateNodeId(id) {
    return "s:" + id;
  }

  function elementsOf(doc) {
    const elements = [];
    const ids = stateIds(doc);
    const known = new Set(ids);
    for (const [id, state] of statesOf(doc)) {
      const classes = ["state"];
      if (id === doc.initial_state) classes.push("initial");
      if (isTerminal(state)) classes.push("terminal");
      const label = id === doc.initial_state ? "▶ " + id : id;
      elements.push({
        group: "nodes",
        data: { id: stateNodeId(id), state: id, label, w: Math.max(60, textWidth(label, FONT_SIZE) + 28) },
        classes: classes.join(" "),
      });
    }
    const globals = globalsOf(doc);
    if (globals.length) {
      const label = "any state";
      elements.push({ group: "nodes", data: { id: ANY, label, w: textWidth(label, FONT_SIZE) + 28 }, classes: "any" });
    }
    const returns = statesOf(doc).some(([, s]) => transitionsOf(s).some((t) => t && t.target_state === RETURN))
      || globals.some((t) => t && t.target_state === RETURN);
    if (returns) {
      const label = "↩ back where it came from";
      elements.push({ group: "nodes", data: { id: BACK, label, w: textWidth(label, FONT_SIZE) + 28 }, classes: "any back" });
    }
    const targetNode = (target) => (target === RETURN ? BACK : stateNodeId(target));
    for (const [id, state] of statesOf(doc)) {
      transitionsOf(state).forEach((t, index) => {
        if (!t || !(known.has(t.target_state) || t.target_state === RETURN)) return; // not a state: the problems say so
        const label = wrapped(transitionLabel(t));
        elements.push({
          group: "edges",
          data: { id: `t:${id}:${index}`, source: stateNodeId(id), target: targetNode(t.target_state), label, kind: "transition", state: id, index, lw: textWidth(label, EDGE_FONT_SIZE), lines: label.split("\n").length },
          classes: "transition" + (t.target_state === id ? " loop" : ""),
        });
      });
    }
    globals.forEach((t, index) => {
      if (!t || !(known.has(t.target_state) || t.target_state === RETURN)) return;
      const label = wrapped(transitionLabel(t));
      elements.push({
        group: "edges",
        data: { id: `g:${index}`, source: ANY, target: targetNode(t.target_state), label, kind: "global_transition", index, lw: textWidth(label, EDGE_FONT_SIZE), lines: label.split("\n").length },
        classes: "global",
      });
    });
    return elements;
  }

  const STYLE = [
    {
      selector: "node",
      style: {
        shape: "round-rectangle",
        width: 60,
        height: 32,
        "text-valign": "center",
        "text-halign": "center",
        "font-family": FONT_FAMILY,
        "font-size": FONT_SIZE,
        color: "#1f2328",
        "background-color": "#eef2ff",
        "border-width": 1.5,
        "border-color": "#6366f1",
      },
    },
    { selector: "node[label]", style: { label: "data(label)", width: "data(w)" } },
    { selector: "edge[label]", style: { label: "data(label)" } },
    { selector: "node.initial", style: { "border-width": 3, "font-weight": "bold" } },
    { selector: "node.terminal", style: { shape: "ellipse", "background-color": "#ecfdf3", "border-color": "#12b76a", "border-style": "double", "border-width": 4 } },
    { selector: "node.any", style: { "background-color": "#f9fafb", "border-style": "dashed", "border-color": "#98a2b3", color: "#475467" } },
    {
      selector: "edge",
      style: {
        width: 1.5,
        "curve-style": "bezier",
        "target-arrow-shape": "triangle",
        "line-color": "#667085",
        "target-arrow-color": "#667085",
        "font-family": FONT_FAMILY,
        "font-size": EDGE_FONT_SIZE,
        color: "#344054",
        "text-background-color": "#ffffff",
        "text-background-opacity": 1,
        "text-background-padding": 2,
        "text-rotation": "none",
        "text-wrap": "wrap",
        "text-max-width": 1000, // the page breaks the lines itself (see wrapped), so it knows each label's size
      },
    },
    {
      selector: "edge.routed",
      style: { "curve-style": "segments", "segment-weights": "data(sw)", "segment-distances": "data(sd)", "edge-distances": "node-position" },
    },
    { selector: "edge.global", style: { "line-style": "dashed", "line-color": "#98a2b3", "target-arrow-color": "#98a2b3", color: "#475467" } },
    { selector: ".has-warning", style: { "border-color": "#dc6803", "line-color": "#dc6803", "target-arrow-color": "#dc6803", "border-width": 3 } },
    { selector: ".has-error", style: { "border-color": "#d92d20", "line-color": "#d92d20", "target-arrow-color": "#d92d20", "border-width": 3 } },
    { selector: "edge.visited", style: { "line-color": "#1d4ed8", "target-arrow-color": "#1d4ed8", width: 3 } },
    { selector: "node.visited", style: { "background-color": "#dbeafe" } },
    { selector: "node.current", style: { "background-color": "#fde68a", "border-color": "#b45309", "border-width": 4 } },
    { selector: ":selected", style: { "overlay-color": "#2563eb", "overlay-opacity": 0.18, "overlay-padding": 5 } },
    { selector: ".eh-preview, .eh-ghost-edge", style: { "line-color": "#2563eb", "target-arrow-color": "#2563eb", "line-style": "dotted", label: "" } },
    { selector: ".eh-ghost-node", style: { width: 1, height: 1, opacity: 0, label: "" } },
    { selector: ".eh-hover", style: { "background-color": "#bfdbfe" } },
  ];

  function setUpGraph() {
    cy = window.cytoscape({
      container: $("graph"),
      style: STYLE,
      boxSelectionEnabled: false,
      selectionType: "single",
      maxZoom: 2.5,
      minZoom: 0.2,
    });
    handles = cy.edgehandles({
      canConnect: (source, target) => (source.hasClass("state") || source.id() === ANY) && target.hasClass("state"),
      edgeParams: () => ({ classes: "eh-made" }),
      snap: false,
      hoverDelay: 50,
    });
    cy.on("ehcomplete", (event, source, target, added) => {
      added.remove();
      const from = source.id() === ANY ? ANY : source.data("state");
      connect(from, target.data("state"));
    });
    cy.on("tap", (event) => {
      if (event.target === cy) pick({ kind: "definition" });
    });
    cy.on("tap", "node", (event) => {
      const node = event.target;
      if (!node.hasClass("state")) pick({ kind: "definition" });
      else pick({ kind: "state", state: node.data("state") });
    });
    cy.on("tap", "edge", (event) => {
      const data = event.target.data();
      if (data.kind === "transition") pick({ kind: "transition", state: data.state, index: data.index });
      else if (data.kind === "global_transition") pick({ kind: "global_transition", index: data.index });
    });
    cy.on("dragfree", "node.state", (event) => {
      const node = event.target;
      const position = node.position();
      page.positions[node.data("state")] = { x: round(position.x), y: round(position.y) };
      freeEdgesOf(node);
      saveLayout();
    });
  }

  function round(number) {
    return Math.round(number * 10) / 10;
  }

  /** Edges of a node an author moved are drawn straight (their bends were laid out for the old place). */
  function freeEdgesOf(node) {
    node.connectedEdges().removeClass("routed");
  }

  function structureOf(doc) {
    return JSON.stringify([elementsOf(doc).map((e) => [e.data.id, e.data.source, e.data.target, e.data.label]), page.rankDir]);
  }

  /** Draw the definition; lay it out again when its states, edges or labels changed. */
  function draw({ relayout = false } = {}) {
    const doc = page.doc || {};
    const structure = structureOf(doc);
    const kept = {};
    cy.nodes().forEach((n) => {
      kept[n.id()] = { ...n.position() };
    });
    cy.batch(() => {
      cy.elements().remove();
      cy.add(elementsOf(doc));
    });
    if (relayout || structure !== page.structure) {
      layOut();
    } else {
      cy.nodes().forEach((n) => {
        if (kept[n.id()]) n.position(kept[n.id()]);
      });
      reroute();
    }
    page.structure = structure;
    $("graph-empty").hidden = page.doc === null || stateIds(page.doc).length > 0;
    markSelection();
    markProblems();
    markChat();
  }

  /**
   * Lay the graph out with dagre, edge labels included (each label is a box dagre keeps apart from the
   * nodes and the other labels), then draw each edge through its label's place. States the author moved
   * stay where they were put, the others are pushed off them; the edges of both are drawn straight.
   */
  function layOut() {
    const nodes = cy.nodes();
    if (!nodes.length) return;
    let laid;
    if (page.rankDir === "auto") {
      const width = Math.max(cy.width(), 1);
      const height = Math.max(cy.height(), 1);
      const scale = (graph) => Math.min(width / graph.graph().width, height / graph.graph().height);
      const [down, across] = [dagreLayout("TB"), dagreLayout("LR")];
      laid = scale(across) > scale(down) * 1.05 ? across : down;
    } else {
      laid = dagreLayout(page.rankDir);
    }
    page.routes = {};
    cy.batch(() => {
      nodes.forEach((n) => {
        const placed = laid.node(n.id());
        const pinned = n.data("state") !== undefined && page.positions[n.data("state")];
        n.position(pinned ? { x: pinned.x, y: pinned.y } : { x: placed.x, y: placed.y });
      });
      cy.edges().forEach((e) => {
        const edge = laid.edge({ v: e.source().id(), w: e.target().id(), name: e.id() });
        if (edge && typeof edge.x === "number") page.routes[e.id()] = { x: edge.x, y: edge.y };
      });
      page.nudged = clearOfPinned(nodes);
    });
    reroute();
    cy.fit(undefined, 24);
    if (cy.zoom() > 1.4) {
      cy.zoom(1.4); // a small graph is shown at a readable size, not blown up to fill the pane
      cy.center();
    }
  }

  function pinned(node) {
    return node.data("state") !== undefined && Boolean(page.positions[node.data("state")]);
  }

  /**
   * Move the laid-out states off the states the author placed (pushed out along the shorter way, a few rounds):
   * the layout goes around what was pinned. Returns the ids of the nodes it moved (their edges are drawn straight).
   */
  function clearOfPinned(nodes) {
    const fixed = nodes.filter(pinned);
    const moved = new Set();
    if (!fixed.length) return moved;
    const gap = 16;
    for (let round = 0; round < 12; round++) {
      let again = false;
      nodes.forEach((node) => {
        if (pinned(node)) return;
        fixed.forEach((other) => {
          const a = node.position();
          const b = other.position();
          const overlapX = (node.outerWidth() + other.outerWidth()) / 2 + gap - Math.abs(a.x - b.x);
          const overlapY = (node.outerHeight() + other.outerHeight()) / 2 + gap - Math.abs(a.y - b.y);
          if (overlapX <= 0 || overlapY <= 0) return;
          if (overlapX < overlapY) node.position({ x: a.x + (a.x >= b.x ? overlapX : -overlapX), y: a.y });
          else node.position({ x: a.x, y: a.y + (a.y >= b.y ? overlapY : -overlapY) });
          moved.add(node.id());
          again = true;
        });
      });
      if (!again) break;
    }
    return moved;
  }

  function dagreLayout(rankDir) {
    const graph = new window.dagre.graphlib.Graph({ multigraph: true });
    graph.setGraph({ rankdir: rankDir, nodesep: 36, edgesep: 20, ranksep: 40, marginx: 20, marginy: 20 });
    graph.setDefaultEdgeLabel(() => ({}));
    cy.nodes().forEach((n) => {
      graph.setNode(n.id(), { width: n.outerWidth() + 8, height: n.outerHeight() + 8 });
    });
    cy.edges().forEach((e) => {
      graph.setEdge(e.source().id(), e.target().id(), { width: e.data("lw") + 14, height: e.data("lines") * EDGE_FONT_SIZE * 1.3 + 12, labelpos: "c" }, e.id());
    });
    window.dagre.layout(graph);
    return graph;
  }

  /** Bend each edge whose ends are where the layout put them through its label's laid-out place. */
  function reroute() {
    const routes = page.routes || {};
    cy.batch(() => {
      cy.edges().forEach((e) => {
        const at = routes[e.id()];
        const s = e.source();
        const t = e.target();
        const moved = [s, t].some((n) => pinned(n) || (page.nudged && page.nudged.has(n.id())));
        if (!at || s.same(t) || moved) {
          e.removeClass("routed");
          return;
        }
        const p = s.position();
        const q = t.position();
        const dx = q.x - p.x;
        const dy = q.y - p.y;
        const length2 = dx * dx + dy * dy;
        if (length2 < 1) {
          e.removeClass("routed");
          return;
        }
        const weight = ((at.x - p.x) * dx + (at.y - p.y) * dy) / length2;
        const distance = ((at.x - p.x) * dy - (at.y - p.y) * dx) / Math.sqrt(length2);
        e.data({ sw: [weight], sd: [-distance] });
        e.addClass("routed");
      });
    });
  }

  /**
   * Keep the moved positions (and the layout's direction) in the side file. Written at once only while the
   * definition has no unsaved change: otherwise at the next save, so that the side file's ids are the saved
   * file's (a state renamed or added and never saved leaves no position behind).
   */
  async function saveLayout() {
    if (page.doc === null || unsaved() || !page.file) {
      page.layoutPending = page.doc !== null;
      return;
    }
    await writeLayout();
  }

  async function writeLayout() {
    page.layoutPending = false;
    const body = { positions: page.positions };
    if (page.file && "layout_direction" in page.file) body.direction = page.rankDir; // a server that keeps it
    try {
      await api("api/layout", body);
    } catch (error) {
      notice(`The moved positions were not kept: ${error.message}`);
    }
  }

  function cyElementOf(selection) {
    if (!cy || !selection) return null;
    if (selection.kind === "state") return cy.getElementById(stateNodeId(selection.state));
    if (selection.kind === "transition") return cy.getElementById(`t:${selection.state}:${selection.index}`);
    if (selection.kind === "global_transition") return cy.getElementById(`g:${selection.index}`);
    return null;
  }

  function selectionExists(selection) {
    const doc = page.doc;
    if (!doc || selection.kind === "definition") return true;
    if (selection.kind === "state") return stateOf(doc, selection.state) !== undefined;
    if (selection.kind === "transition") return transitionsOf(stateOf(doc, selection.state))[selection.index] !== undefined;
    if (selection.kind === "global_transition") return globalsOf(doc)[selection.index] !== undefined;
    return false;
  }

  function markSelection() {
    cy.elements().unselect();
    const element = cyElementOf(page.selection);
    if (element && element.length) element.select();
    $("delete").disabled = page.selection.kind === "definition";
    $("chat-start-here").disabled = page.selection.kind !== "state";
  }

  function pick(selection) {
    if (!selectionExists(selection)) return;
    page.selection = selection;
    page.lastFormEdit = null;
    markSelection();
    showSelection();
  }

  // -- graph actions --------------------------------------------------------------------------------

  let connectMode = false;

  function setConnectMode(on) {
    connectMode = on;
    $("connect").setAttribute("aria-pressed", String(on));
    if (on) handles.enableDrawMode();
    else handles.disableDrawMode();
  }

  function connect(source, target) {
    if (page.doc === null) return;
    if (source !== ANY && stateOf(page.doc, source) === undefined) return;
    if (stateOf(page.doc, target) === undefined) return;
    let made = null;
    change((draft) => {
      made = addTransition(draft, source, target);
    });
    if (made) pick(made);
    // A move from "any state" can grow the graph past the pane (its node and label): show it whole again,
    // once edgehandles has finished with the drag.
    if (source === ANY) setTimeout(keepInView, 0);
  }

  /** Fit the graph in its pane again when part of it is off the canvas. */
  function keepInView() {
    if (!cy || !cy.elements().length) return;
    const box = cy.elements().renderedBoundingBox();
    if (box.x1 >= 0 && box.y1 >= 0 && box.x2 <= cy.width() && box.y2 <= cy.height()) return;
    cy.fit(undefined, 24);
    if (cy.zoom() > 1.4) {
      cy.zoom(1.4);
      cy.center();
    }
  }

  /** What the page says when the file is not JSON and something asks for a definition. */
  function notJsonText() {
    const name = page.file ? page.file.name : "the file";
    if (page.file && page.file.gone) {
      return `${name} is no longer on disk (moved or deleted), so there is nothing to add to or try yet: put it back `
        + "and reload the page, or start a new definition at this path (above; Save then writes it).";
    }
    return `${name} is not JSON, so there is nothing to add to or try yet: start it empty first `
      + "(Start from an empty definition, above; Save then writes over it), or fix the file in a text editor and reload.";
  }

  function openAddState() {
    if (page.doc === null) {
      if (page.file && page.file.gone) goneNotice();
      else notice(notJsonText(), { offerEmpty: Boolean(page.file && page.file.parse_error) });
      return;
    }
    $("add-state-form").hidden = false;
    $("new-state-error").textContent = "";
    $("new-state-id").value = "";
    $("new-state-id").focus();
  }

  function closeAddState() {
    $("add-state-form").hidden = true;
  }

  function submitAddState(event) {
    event.preventDefault();
    const id = $("new-state-id").value.trim();
    const problem = idProblem(id, page.doc);
    if (problem) {
      $("new-state-error").textContent = problem;
      return;
    }
    closeAddState();
    change((draft) => addState(draft, id), { select: { kind: "state", state: id } });
  }

  function confirmInPage(text) {
    const dialog = $("confirm-dialog");
    $("confirm-text").textContent = text;
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
      dialog.returnValue = "";
      dialog.showModal();
    });
  }

  async function deleteSelected() {
    const selection = page.selection;
    if (selection.kind === "state") {
      const into = transitionsInto(page.doc, selection.state);
      const going = into ? ` and the ${into} transition${into === 1 ? "" : "s"} leading to it` : "";
      const initial = page.doc.initial_state === selection.state
        ? " It is the initial state: the conversation starts nowhere until you make another state initial."
        : "";
      const ok = await confirmInPage(`Delete the state '${selection.state}'${going}?${initial}`);
      if (!ok) return;
      const at = page.positions[selection.state];
      const layout = at ? [selection.state, null, at] : null;
      const gone = selection.state;
      rekeyDrafts((s) => (s.kind !== "definition" && s.kind !== "global_transition" && s.state === gone ? null : s));
      change((draft) => deleteState(draft, selection.state), { select: { kind: "definition" }, layout });
      if (layout) {
        movePosition(selection.state, null);
        saveLayout();
      }
    } else if (selection.kind === "transition") {
      const { state: id, index } = selection;
      rekeyDrafts((s) => {
        if (s.kind !== "transition" || s.state !== id || s.index < index) return s;
        return s.index === index ? null : { ...s, index: s.index - 1 };
      });
      change((draft) => {
        const before = structuredClone(draft);
        stateOf(draft, id).transitions.splice(index, 1);
        dropEmptied(draft, before);
      }, { select: { kind: "state", state: id } });
    } else if (selection.kind === "global_transition") {
      const { index } = selection;
      rekeyDrafts((s) => {
        if (s.kind !== "global_transition" || s.index < index) return s;
        return s.index === index ? null : { ...s, index: s.index - 1 };
      });
      change((draft) => {
        const before = structuredClone(draft);
        draft.global_transitions.splice(index, 1);
        dropEmptied(draft, before);
      }, { select: { kind: "definition" } });
    }
  }

  function rename(from, to) {
    const problem = idProblem(to, page.doc, from);
    if (problem) {
      $("rename-error").textContent = problem;
      return false;
    }
    $("rename-error").textContent = "";
    if (from === to) return true;
    const layout = page.positions[from] ? [from, to, page.positions[from]] : null;
    if (layout) movePosition(from, to);
    rekeyDrafts((s) => (s.kind !== "definition" && s.kind !== "global_transition" && s.state === from ? { ...s, state: to } : s));
    chatRenamed(from, to); // before the change: the restart offer is computed with the new name
    change((draft) => renameState(draft, from, to), { select: { kind: "state", state: to }, layout, rename: [from, to] });
    if (layout) saveLayout();
    return true;
  }

  // -- the selection's form -------------------------------------------------------------------------

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function formsAvailable() {
    return Boolean(window.SchemaForms && typeof window.SchemaForms.render === "function");
  }

  /**
   * Draw the selection's form. forms.js keeps the text of a field that is not valid yet in `drafts` (the
   * element's own object, kept here: selecting another element and coming back shows the text again) and
   * says which fields hold such text (onInvalid); the page counts them as unsaved and Save refuses them.
   */
  function renderForm(type, value, onChange, omit) {
    const container = $("form");
    clear(container);
    page.form = null;
    $("forms-missing").hidden = formsAvailable();
    if (!formsAvailable()) return;
    const selection = structuredClone(page.selection);
    const entry = draftsOf(selection);
    try {
      const handle = window.SchemaForms.render(container, {
        schema: page.file.schema,
        type,
        value: structuredClone(value),
        onChange,
        catalog: page.file.catalog || {},
        omit, // a state's id is renamed above the form (every reference follows), its transitions listed below it
        stateIds: stateIds(page.doc),
        drafts: entry.fields,
        onInvalid: (paths) => setPending(selection, paths),
        onUseTool: declareTool,
      });
      page.form = handle && typeof handle.invalid === "function" ? { selection, handle } : null;
      formInvalidChanged();
    } catch (error) {
      const failed = document.createElement("p");
      failed.className = "error-text";
      failed.textContent = `The form could not be drawn: ${error.message}`;
      container.appendChild(failed);
    }
  }

  /**
   * The undo-merging key of a form's edit (see change): the form and the fields the edit changed, so typing
   * in one field is one step and the next field (or a button of the form) starts another.
   */
  function fieldsKey(form, before, value) {
    const keys = new Set([...Object.keys(before || {}), ...Object.keys(value || {})]);
    const changed = [...keys].filter((k) => JSON.stringify((before || {})[k]) !== JSON.stringify((value || {})[k]));
    return `${form}:${changed.sort().join(",")}`;
  }

  /** The shown form's fields holding text not applied yet, as forms.js says (also for a forms.js without onInvalid). */
  function formInvalidChanged() {
    if (!page.form) return;
    let paths = [];
    try {
      paths = page.form.handle.invalid();
    } catch (_) {
      paths = [];
    }
    setPending(page.form.selection, paths);
  }

  /**
   * A state form named a tool the definition does not declare: declare it at the top level too (the least
   * the schema's Tool and the loader accept: `{}`, its code comes from --hooks or an MCP server), in the same
   * undo step as the state's edit that named it (forms.js calls this right after that onChange).
   */
  function declareTool(name) {
    if (typeof name !== "string" || !name || page.doc === null) return;
    const tools = page.doc.tools;
    if (tools !== undefined && (tools === null || typeof tools !== "object" || Array.isArray(tools))) return; // not ours to replace
    if (holds(tools, name)) return;
    change((draft) => {
      if (!holds(draft, "tools")) putKey(draft, "tools", {}, "definition");
      draft.tools[name] = {};
    }, { formKey: "tools", withLast: true });
  }

  function showSelection() {
    const selection = page.selection;
    const doc = page.doc;
    const key = doc === null ? null : elementKey(selection) || "d";
    if (key !== page.shownKey) $("selection").scrollTop = 0; // a new element's form is read from its top
    page.shownKey = key;
    $("rename").hidden = selection.kind !== "state";
    $("transition-list-box").hidden = selection.kind !== "state";
    $("rename-error").textContent = "";
    if (doc === null) {
      $("selection-title").textContent = "Nothing to edit";
      clear($("form"));
      return;
    }
    if (selection.kind === "state") {
      const id = selection.state;
      $("selection-title").textContent = `State ${id}`;
      $("rename-id").value = id;
      $("make-initial").checked = doc.initial_state === id;
      const state = stateOf(doc, id);
      renderForm("State", withoutKeys(state, ["transitions", "id"]), (value) => {
        const formKey = fieldsKey(`state:${id}`, withoutKeys(stateOf(page.doc, id), ["transitions", "id"]), value);
        change((draft) => replaceKeeping(stateOf(draft, id), value, ["transitions", "id"], "State"), { formKey });
      }, ["transitions", "id"]);
      refreshTransitionList();
    } else if (selection.kind === "transition") {
      $("selection-title").textContent = `Transition ${selection.state} → ${transitionsOf(stateOf(doc, selection.state))[selection.index].target_state}`;
      renderForm("Transition", transitionsOf(stateOf(doc, selection.state))[selection.index], (value) => {
        const before = transitionsOf(stateOf(page.doc, selection.state))[selection.index];
        change((draft) => {
          const list = stateOf(draft, selection.state).transitions;
          replaceKeeping(list[selection.index], value, [], "Transition");
        }, { formKey: fieldsKey(`t:${selection.state}:${selection.index}`, before, value) });
      }, []);
    } else if (selection.kind === "global_transition") {
      $("selection-title").textContent = `Global transition → ${globalsOf(doc)[selection.index].target_state}`;
      renderForm("GlobalTransition", globalsOf(doc)[selection.index], (value) => {
        const before = globalsOf(page.doc)[selection.index];
        change((draft) => {
          replaceKeeping(draft.global_transitions[selection.index], value, [], "GlobalTransition");
        }, { formKey: fieldsKey(`g:${selection.index}`, before, value) });
      }, []);
    } else {
      $("selection-title").textContent = `Definition ${typeof doc.name === "string" ? doc.name : ""}`;
      renderForm("definition", withoutKeys(doc, ["states"]), (value) => {
        change((draft) => replaceKeeping(draft, value, ["states"], "definition"), { formKey: fieldsKey("definition", withoutKeys(page.doc, ["states"]), value) });
      }, ["states"]);
    }
  }

  function withoutKeys(object, keys) {
    const copy = {};
    for (const [key, value] of Object.entries(object || {})) if (!keys.includes(key)) copy[key] = value;
    return copy;
  }

  /**
   * Make `target` hold `value`'s members, keeping its own `kept` members; the members it had stay where they
   * are, a new one goes at its place in the schema's order of `type` (putKey).
   */
  function replaceKeeping(target, value, kept, type) {
    for (const key of Object.keys(target)) if (!kept.includes(key) && !holds(value, key)) delete target[key];
    for (const [key, member] of Object.entries(value)) {
      if (kept.includes(key)) continue;
      if (holds(target, key)) target[key] = member;
      else putKey(target, key, member, type);
    }
  }

  function refreshTransitionList() {
    const list = $("transition-list");
    clear(list);
    if (page.selection.kind !== "state" || page.doc === null) return;
    const id = page.selection.state;
    const ordered = inPriorityOrder(transitionsOf(stateOf(page.doc, id)));
    ordered.forEach(({ t, index }, place) => {
      const item = document.createElement("li");
      item.draggable = true;
      item.dataset.index = String(index);
      const text = document.createElement("button");
      text.type = "button";
      text.className = "link";
      text.textContent = `${transitionLabel(t)} → ${t.target_state}`;
      text.addEventListener("click", () => pick({ kind: "transition", state: id, index }));
      const up = document.createElement("button");
      up.type = "button";
      up.textContent = "↑";
      up.title = "Earlier (a lower priority number)";
      up.disabled = place === 0;
      up.addEventListener("click", () => move(id, ordered.map((o) => o.index), place, place - 1));
      const down = document.createElement("button");
      down.type = "button";
      down.textContent = "↓";
      down.title = "Later (a higher priority number)";
      down.disabled = place === ordered.length - 1;
      down.addEventListener("click", () => move(id, ordered.map((o) => o.index), place, place + 1));
      item.append(up, down, text);
      item.addEventListener("dragstart", (event) => {
        event.dataTransfer.setData("text/plain", String(place));
        event.dataTransfer.effectAllowed = "move";
      });
      item.addEventListener("dragover", (event) => {
        event.preventDefault();
        item.classList.add("drop");
      });
      item.addEventListener("dragleave", () => item.classList.remove("drop"));
      item.addEventListener("drop", (event) => {
        event.preventDefault();
        const from = Number(event.dataTransfer.getData("text/plain"));
        if (Number.isInteger(from)) move(id, ordered.map((o) => o.index), from, place);
      });
      list.appendChild(item);
    });
  }

  /** Move the transition at `from` (a place in priority order) to `to`, rewriting priorities. */
  function move(id, order, from, to) {
    if (from === to || to < 0 || to >= order.length) return;
    const next = order.slice();
    const [moved] = next.splice(from, 1);
    next.splice(to, 0, moved);
    change((draft) => reorder(stateOf(draft, id).transitions, next));
  }

  // -- problems -------------------------------------------------------------------------------------

  function scheduleCheck() {
    clearTimeout(page.checkTimer);
    if (page.doc === null) return;
    page.checkTimer = setTimeout(runCheck, CHECK_DELAY_MS);
  }

  async function runCheck() {
    const version = page.version;
    page.checking += 1;
    try {
      const answer = await api("api/check", { value: page.doc });
      if (version === page.version) {
        page.problems = answer.diagnostics || [];
        page.checkedVersion = version;
        showProblems();
      }
    } catch (error) {
      if (version === page.version) {
        page.problems = [{ severity: "error", code: "check_failed", path: "", line: null, column: null, message: error.message, hint: null, element: { kind: "definition" } }];
        page.checkedVersion = version;
        showProblems();
      }
    } finally {
      page.checking -= 1;
    }
  }

  function elementKey(element) {
    if (!element) return "";
    if (element.kind === "state") return `s:${element.state}`;
    if (element.kind === "transition") return `t:${element.state}:${element.index}`;
    if (element.kind === "global_transition") return `g:${element.index}`;
    return "";
  }

  function markProblems() {
    if (!cy) return;
    cy.elements().removeClass("has-error has-warning");
    for (const problem of page.problems) {
      const key = elementKey(problem.element);
      if (!key) continue;
      const element = cy.getElementById(key);
      if (!element.length) continue;
      element.addClass(problem.severity === "error" ? "has-error" : "has-warning");
    }
  }

  function showProblems() {
    const list = $("problems");
    clear(list);
    const errors = page.problems.filter((p) => p.severity === "error").length;
    const warnings = page.problems.length - errors;
    $("problem-count").textContent = page.problems.length
      ? `${errors} error${errors === 1 ? "" : "s"}, ${warnings} warning${warnings === 1 ? "" : "s"}`
      : "none: validate --strict passes";
    for (const problem of page.problems) {
      const item = document.createElement("li");
      item.className = `problem ${problem.severity}`;
      item.dataset.code = problem.code;
      item.tabIndex = 0;
      const head = document.createElement("div");
      const severity = document.createElement("span");
      severity.className = "severity";
      severity.textContent = problem.severity;
      const code = document.createElement("code");
      code.textContent = problem.code;
      const where = document.createElement("span");
      where.className = "where";
      where.textContent = problem.line != null ? `${problem.line}:${problem.column}` : "";
      const path = document.createElement("code");
      path.className = "path";
      path.textContent = problem.path || "";
      head.append(severity, " ", code, " ", where, " ", path);
      const message = document.createElement("p");
      message.className = "message";
      message.textContent = problem.message;
      item.append(head, message);
      if (problem.hint) {
        const hint = document.createElement("p");
        hint.className = "hint";
        hint.textContent = "hint: " + problem.hint;
        item.appendChild(hint);
      }
      const go = () => {
        const element = problem.element || { kind: "definition" };
        if (selectionExists(element)) pick(element);
        const drawn = cyElementOf(element);
        if (drawn && drawn.length) cy.animate({ center: { eles: drawn } }, { duration: 150 });
      };
      item.addEventListener("click", go);
      item.addEventListener("keydown", (event) => {
        if (event.key === "Enter") go();
      });
      list.appendChild(item);
    }
    markProblems();
  }

  // -- saving and reloading ---------------------------------------------------------------------------

  async function save(force = false) {
    if (page.doc === null) return;
    const pending = pendingFields();
    if (pending.length) {
      // Saving now would write the definition without that text, and the author would believe it saved.
      const n = pending.length;
      notice(`Not saved: ${n} field${n === 1 ? " holds" : "s hold"} text that is not valid yet, so it is not in the `
        + "definition. Fix or clear it first:", {
        links: pending.map(({ selection, path }) => ({ text: `${elementName(selection)}: ${path}`, go: () => showField(selection, path) })),
        kind: "save",
      });
      return;
    }
    $("save-state").textContent = "saving…";
    try {
      const answer = await api("api/save", { value: page.doc, sha: page.sha, force });
      page.sha = answer.sha;
      page.savedJson = JSON.stringify(page.doc);
      if (["new", "save", "gone"].includes(page.noticeKind)) hideNotice(); // a new file, or "not saved": no more
      if (page.layoutPending) await writeLayout(); // the positions of the definition as saved
      showSaveState();
      $("save-state").textContent = answer.unchanged ? "saved (the file already held this)" : "saved";
      $("save-state").dataset.saves = String(Number($("save-state").dataset.saves || 0) + 1);
    } catch (error) {
      showSaveState();
      if (error instanceof ApiError && error.status === 409 && missingOnDisk(error)) {
        missing(error.message);
      } else if (error instanceof ApiError && error.status === 409) {
        conflict();
      } else {
        notice(`Not saved: ${error.message}`, { kind: "save" });
      }
    }
  }

  /** The 409 of a file that was read and is gone now (the API's code; an older server: no sha on disk). */
  function missingOnDisk(error) {
    if (error.code === "missing_on_disk") return true;
    return error.code !== "changed_on_disk" && error.body && error.body.sha === "";
  }

  /** The file is gone from disk: Reload would read nothing and empty the graph, so it is not offered. */
  function missing(message) {
    const dialog = $("missing-dialog");
    $("missing-text").textContent = message || `${page.file ? page.file.name : "The file"} is no longer on disk (moved or deleted).`;
    dialog.returnValue = "";
    dialog.addEventListener("close", () => {
      if (dialog.returnValue === "force") save(true);
    }, { once: true });
    dialog.showModal();
  }

  function conflict() {
    const dialog = $("conflict-dialog");
    dialog.returnValue = "";
    dialog.addEventListener("close", () => {
      if (dialog.returnValue === "reload") reload();
      else if (dialog.returnValue === "overwrite") save(true);
    }, { once: true });
    dialog.showModal();
  }

  function emptyDefinition() {
    const stem = (page.file.name || "definition").replace(/\.[^.]*$/, "");
    return { name: stem, states: {} };
  }

  /** The file this editor read is gone: say so, and offer an empty start only as a choice of its own. */
  function goneNotice() {
    const name = page.file ? page.file.name : "The file";
    notice(`${name} is no longer on disk (moved or deleted). Put it back and reload the page, or start a new `
      + "definition at this path (nothing is written there until you do and save).", {
      links: [{ text: "Start a new definition at this path", go: startEmpty }],
      kind: "gone",
    });
  }

  /** An empty definition in place of one that is not JSON or is gone: an unsaved change, Save writes it. */
  function startEmpty() {
    page.doc = emptyDefinition();
    page.undo = [];
    page.redo = [];
    hideNotice();
    setDoc(page.doc);
  }

  /** Read the file (again): the page's edits, undo and redo are dropped, except when the file is gone from disk:
   * the definition the page holds is then all there is of it, so it stays (unsaved; Save asks before writing). */
  async function reload() {
    let file;
    try {
      file = await api("api/file");
    } catch (error) {
      $("save-state").textContent = "could not read the file";
      notice(`The file could not be read: ${error.message}`);
      return;
    }
    if (file.gone && page.doc !== null) {
      page.file = file;
      page.savedJson = null; // not on disk: nothing of it is saved
      notice(`${file.name} is no longer on disk (moved or deleted). The definition you were editing is kept here; `
        + "Save offers to write it again at this path.", { kind: "gone" });
      showSaveState();
      return;
    }
    page.file = file;
    page.sha = file.sha;
    page.positions = file.layout || {};
    page.layoutPending = false;
    page.rankDir = ["auto", "TB", "LR"].includes(file.layout_direction) ? file.layout_direction : "auto";
    $("rank-dir").value = page.rankDir;
    page.undo = [];
    page.redo = [];
    page.drafts = {};
    page.form = null;
    page.selection = { kind: "definition" };
    page.problems = [];
    $("file-name").textContent = file.path;
    $("chat-model").textContent = file.model ? `(model: ${file.model})` : "";
    hideNotice();
    if (file.layout_problem) notice(`The moved positions were not read: ${file.layout_problem}`);
    if (file.parse_error) {
      page.doc = null;
      page.savedJson = null;
      page.problems = [file.parse_error];
      notice(`${file.name} is not a definition the editor can read: ${file.parse_error.message}`, { offerEmpty: true });
      draw();
      showSelection();
      showProblems();
      showSaveState();
      return;
    }
    if (file.gone) {
      // Read before and gone now: not a new file, and an empty start saved would write nothing over its path.
      page.doc = null;
      page.savedJson = null;
      page.problems = [{
        severity: "error", code: "missing_on_disk", file: file.path, path: "", line: null, column: null,
        message: `${file.path} is no longer on disk (moved or deleted)`,
      }];
      goneNotice();
      draw();
      showSelection();
      showProblems();
      showSaveState();
      return;
    }
    if (file.value === null || file.value === undefined) {
      // A new (missing or empty) file: start from a name and no states, so the problems list says at once
      // what a definition still needs (a state, the initial state); the first state added becomes initial.
      page.savedJson = null;
      page.doc = null;
      page.doc = emptyDefinition();
      notice(`${file.name} is ${file.exists ? "empty" : "a new file"}: this definition starts with its name and no states. `
        + "Add a state (the first one is the initial state); Save writes the file.", { kind: "new" });
    } else {
      page.doc = file.value;
      page.savedJson = JSON.stringify(file.value);
    }
    page.version += 1;
    page.structure = "";
    draw();
    showSelection();
    showSaveState();
    scheduleCheck();
  }

  // -- try it ------------------------------------------------------------------------------------------

  function say(role, text) {
    const item = document.createElement("li");
    item.className = role;
    item.textContent = text;
    $("transcript").appendChild(item);
    item.scrollIntoView({ block: "nearest" });
  }

  /** The turn's tool runs (the answer's `tool_calls`) as lines of the transcript, before the reply. */
  function sayToolCalls(answer) {
    const calls = Array.isArray(answer.tool_calls) ? answer.tool_calls : [];
    for (const call of calls) {
      if (!call || typeof call !== "object") continue;
      let args = "";
      try {
        args = JSON.stringify(call.arguments === undefined ? {} : call.arguments);
      } catch (_) {
        args = String(call.arguments);
      }
      const outcome = call.ok ? "ok" : `failed${call.error ? ": " + call.error : ""}`;
      say("tool", `tool ${call.name}(${args}) → ${outcome}`);
    }
  }

  async function startChat(fromState) {
    $("chat-error").textContent = "";
    if (page.doc === null) {
      $("chat-error").textContent = notJsonText();
      return;
    }
    const started = JSON.stringify(page.doc);
    try {
      const answer = await api("api/chat/start", { value: page.doc, state: fromState || null, context: null });
      clear($("transcript"));
      $("chat-error").textContent = "";
      const visited = answer.visited || [answer.state];
      // the moves of the start itself (an automatic move, an opening that moved), then each turn's edge
      const edges = visited.slice(1).map((to, i) => ({ from: visited[i], to }));
      page.chat = { state: answer.state, visited, edges, ended: answer.ended, startedJson: started };
      sayToolCalls(answer);
      if (answer.message) say("assistant", answer.message);
      chatMoved(answer);
    } catch (error) {
      $("chat-error").textContent = error.message;
    }
  }

  async function sendChat(event) {
    event.preventDefault();
    const text = $("chat-message").value;
    if (!text.trim() || !page.chat) return;
    $("chat-message").value = "";
    say("user", text);
    $("chat-send").disabled = true;
    try {
      const answer = await api("api/chat/send", { text });
      $("chat-error").textContent = "";
      sayToolCalls(answer);
      if (answer.message) say("assistant", answer.message);
      if (answer.edge) page.chat.edges.push(answer.edge);
      page.chat.state = answer.state;
      page.chat.ended = answer.ended;
      if (Array.isArray(answer.visited)) page.chat.visited = answer.visited;
      chatMoved(answer);
    } catch (error) {
      $("chat-error").textContent = error.message;
    } finally {
      $("chat-send").disabled = false;
    }
  }

  function chatMoved(answer) {
    const chat = page.chat;
    const ended = Boolean(answer.ended);
    $("chat-message").disabled = ended;
    $("chat-send").disabled = ended;
    $("chat-state").textContent = `in ${chat.state}${ended ? " (ended)" : ""}${answer.paused ? " (paused)" : ""}`;
    $("chat-restart").hidden = true;
    markChat();
  }

  /** The chat's current state and path on the graph; after an edit, the offer to restart. */
  function markChat() {
    if (!cy) return;
    cy.elements().removeClass("current visited");
    const chat = page.chat;
    if (!chat) return;
    for (const id of chat.visited) cy.getElementById(stateNodeId(id)).addClass("visited");
    const steps = chat.edges.length ? chat.edges : chat.visited.slice(1).map((to, i) => ({ from: chat.visited[i], to }));
    for (const step of steps) {
      const edges = pathEdgeOf(step);
      edges.addClass("visited");
      edges.targets().filter((n) => n.id() === BACK).addClass("visited"); // went back: the "back" node too
    }
    cy.getElementById(stateNodeId(chat.state)).addClass("current");
  }

  /**
   * The drawn edge a move of the chat went along: the transition from→to; else a global transition to `to`;
   * else `from`'s (or a global) `"$return"` edge, drawn to the "back" node (the API names where it returned to).
   */
  function pathEdgeOf(step) {
    const from = stateNodeId(step.from);
    const to = stateNodeId(step.to);
    const direct = cy.edges().filter((e) => e.source().id() === from && e.target().id() === to);
    if (direct.length) return direct;
    const global = cy.edges(".global").filter((e) => e.target().id() === to);
    if (global.length) return global;
    const back = cy.edges().filter((e) => e.source().id() === from && e.target().id() === BACK);
    if (back.length) return back;
    return cy.edges(".global").filter((e) => e.target().id() === BACK);
  }

  /** A rename (or its undo) of the chat's current state: the chat follows it. */
  function chatRenamed(from, to) {
    const chat = page.chat;
    if (!chat) return;
    if (chat.state === from) chat.state = to;
    chat.visited = chat.visited.map((id) => (id === from ? to : id));
    chat.edges = chat.edges.map((e) => ({ from: e.from === from ? to : e.from, to: e.to === from ? to : e.to }));
  }

  /** After every change (undo included): offer to restart, unless the definition is again the one it started on. */
  function chatSawEdit() {
    $("chat-error").textContent = ""; // what it said was about the definition before this change
    if (!page.chat) return;
    const same = JSON.stringify(page.doc) === page.chat.startedJson;
    $("chat-restart").hidden = same;
    const still = stateOf(page.doc, page.chat.state) !== undefined;
    const button = $("chat-restart-current");
    button.hidden = same || !still;
    button.textContent = `Restart from ${page.chat.state}`;
  }

  // -- keys and wiring ---------------------------------------------------------------------------------

  function typing(target) {
    if (!target || !target.tagName) return false;
    const tag = target.tagName.toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || target.isContentEditable;
  }

  /** Holding Shift is Connect for as long as it is held (a drag from a state then draws a transition). */
  function onShift(event) {
    if (event.key !== "Shift" || connectMode || !handles) return;
    if (event.type === "keydown" && !typing(event.target)) handles.enableDrawMode();
    else if (event.type === "keyup") handles.disableDrawMode();
  }

  function onKey(event) {
    onShift(event);
    const mod = event.ctrlKey || event.metaKey;
    const key = event.key.toLowerCase();
    if (mod && key === "s") {
      event.preventDefault();
      save();
      return;
    }
    if (document.querySelector("dialog[open]")) return;
    if (typing(event.target)) return; // the field's own undo and delete
    if (mod && key === "z") {
      event.preventDefault();
      if (event.shiftKey) redo();
      else undo();
    } else if (mod && key === "y") {
      event.preventDefault();
      redo();
    } else if (!mod && (event.key === "Delete" || event.key === "Backspace")) {
      if (page.selection.kind !== "definition") {
        event.preventDefault();
        deleteSelected();
      }
    } else if (!mod && key === "a") {
      event.preventDefault();
      openAddState();
    }
  }

  function wire() {
    $("add-state").addEventListener("click", openAddState);
    $("add-state-form").addEventListener("submit", submitAddState);
    $("add-state-cancel").addEventListener("click", closeAddState);
    $("new-state-id").addEventListener("keydown", (event) => {
      if (event.key === "Escape") closeAddState();
    });
    $("new-state-id").addEventListener("input", () => {
      const id = $("new-state-id").value.trim();
      $("new-state-error").textContent = id ? idProblem(id, page.doc) : "";
    });
    $("connect").addEventListener("click", () => setConnectMode(!connectMode));
    $("delete").addEventListener("click", deleteSelected);
    $("layout").addEventListener("click", () => draw({ relayout: true }));
    $("rank-dir").addEventListener("change", () => {
      page.rankDir = $("rank-dir").value;
      draw({ relayout: true });
      saveLayout(); // the direction is kept beside the positions
    });
    $("unpin").addEventListener("click", () => {
      page.positions = {};
      saveLayout();
      draw({ relayout: true });
    });
    $("undo").addEventListener("click", undo);
    $("redo").addEventListener("click", redo);
    $("save").addEventListener("click", () => save());
    $("rename-apply").addEventListener("click", () => rename(page.selection.state, $("rename-id").value.trim()));
    $("rename-id").addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        rename(page.selection.state, $("rename-id").value.trim());
      }
    });
    $("make-initial").addEventListener("change", () => {
      const id = page.selection.state;
      if ($("make-initial").checked) change((draft) => putKey(draft, "initial_state", id, "definition"));
      else $("make-initial").checked = true; // a definition has one initial state: choose another instead
    });
    $("notice-close").addEventListener("click", hideNotice);
    $("start-empty").addEventListener("click", startEmpty);
    // forms.js without onInvalid: read its invalid() after each keystroke (with it, the same answer)
    $("form").addEventListener("input", formInvalidChanged);
    $("form").addEventListener("change", formInvalidChanged);
    $("chat-start").addEventListener("click", () => startChat(null));
    $("chat-start-here").addEventListener("click", () => startChat(page.selection.state));
    $("chat-restart-initial").addEventListener("click", () => startChat(null));
    $("chat-restart-current").addEventListener("click", () => startChat(page.chat && page.chat.state));
    $("chat-form").addEventListener("submit", sendChat);
    document.addEventListener("keydown", onKey);
    document.addEventListener("keyup", onShift);
    window.addEventListener("blur", () => { if (handles && !connectMode) handles.disableDrawMode(); });
    window.addEventListener("beforeunload", (event) => {
      if (!unsaved() && !(page.doc !== null && pendingFields().length)) return;
      event.preventDefault();
      event.returnValue = "";
    });
    window.addEventListener("resize", () => cy && cy.resize());
  }

  // -- for tests, and for the curious in the console ------------------------------------------------------

  window.editor = {
    get cy() {
      return cy;
    },
    doc: () => structuredClone(page.doc),
    select(kind, a, b) {
      if (kind === "state") pick({ kind, state: a });
      else if (kind === "transition") pick({ kind, state: a, index: b });
      else if (kind === "global_transition") pick({ kind, index: a });
      else pick({ kind: "definition" });
      return structuredClone(page.selection);
    },
    selection: () => structuredClone(page.selection),
    problems: () => structuredClone(page.problems),
    /** True once the problems shown are those of the definition as it is now. */
    idle: () => page.checking === 0 && page.checkedVersion === page.version,
    unsaved,
    /** The fields holding text not applied yet: [{selection, path}]. */
    pending: () => structuredClone(pendingFields()),
    change: (edit) => change(edit),
    connect,
    rename,
    undo,
    redo,
    save,
    layOut: () => draw({ relayout: true }),
    positions: () => structuredClone(page.positions),
    sha: () => page.sha,
  };

  document.addEventListener("DOMContentLoaded", () => {
    wire();
    setUpGraph();
    reload();
  });
})();
