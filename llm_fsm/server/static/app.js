// The page of `llm-fsm serve`: pick a definition, chat (streamed), and watch the graph, the context and
// what each turn refused. Plain JavaScript, no build step. Every text from the server or the model is
// inserted as text (textContent), never as HTML; the only markup inserted is Mermaid's drawing of the
// definition's graph, which Mermaid sanitises (securityLevel "strict") and which holds no conversation text.
"use strict";

const TOKEN_KEY = "llm-fsm-token"; // sessionStorage: this tab only, never in the URL
const CONVERSATION_KEY = "llm-fsm-conversation";

const page = {
  definitions: new Map(), // name -> the definition as GET /definitions gives it
  definition: null, // the definition picked (or the conversation's)
  conversation: null, // the conversation as GET /conversations/{id} gives it
  path: [], // the states the conversation went through, in order
  busy: false,
  older: null, // the index of the first turn shown when earlier ones are in the store (their page's cursor)
  loadingOlder: false,
  drawing: 0, // the latest graph drawing (an older one that finishes late is dropped)
};

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function json(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 1);
}

// -- the API --------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (error) {
    throw new ApiError(0, "unreachable", `the server cannot be reached (${error.message})`);
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON (a proxy's page, say): described by its status below
  }
  const error = body && body.error;
  if (error && typeof error.message === "string") return new ApiError(response.status, error.type, error.message);
  return new ApiError(response.status, "http_error", `the server answered ${response.status} ${response.statusText}`);
}

// The Server-Sent Events of a response, as {name, data}. The stream route is a POST, so EventSource
// cannot be used: the body is read as it comes.
async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (error) {
      const outcome = "the conversation holds the whole turn or none of it: reload the page to see which";
      throw new ApiError(0, "stream_broken", `the connection broke during the turn (${error.message}); ${outcome}`);
    }
    buffer += decoder.decode(chunk.value || new Uint8Array(), { stream: !chunk.done });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      let data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data) yield { name, data: JSON.parse(data) }; // ": ping" comments carry no data
    }
    if (chunk.done) return;
  }
}

// -- errors and the token -------------------------------------------------------------------------

function showError(error) {
  if (error instanceof ApiError && error.status === 401) {
    const had = sessionStorage.getItem(TOKEN_KEY);
    sessionStorage.removeItem(TOKEN_KEY);
    askForToken(had ? `The server refused this token: ${error.message}.` : `This server needs a token: ${error.message}.`);
    return;
  }
  const where = error instanceof ApiError && error.status ? ` (${error.type}, HTTP ${error.status})` : "";
  const message = error instanceof ApiError ? error.message : `something went wrong in the page: ${error.message}`;
  $("error-text").textContent = `Error${where}: ${message}`;
  $("error").hidden = false;
}

function clearError() {
  $("error").hidden = true;
  $("error-text").textContent = "";
}

function askForToken(reason) {
  $("token-reason").textContent = reason;
  $("token-form").hidden = false;
  $("forget-token").hidden = true;
  $("token").focus();
}

async function useToken(event) {
  event.preventDefault();
  const token = $("token").value.trim();
  if (!token) return;
  if (!/^[\x21-\x7e]+$/.test(token)) {
    $("token-reason").textContent = "A token is made of visible ASCII characters, without spaces: check what was pasted.";
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  $("token-form").hidden = true;
  await loadDefinitions();
}

function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
}

// -- definitions ----------------------------------------------------------------------------------

async function loadDefinitions() {
  clearError();
  let listed;
  try {
    listed = (await (await api("GET", "definitions")).json()).definitions;
  } catch (error) {
    showError(error);
    return;
  }
  $("forget-token").hidden = !sessionStorage.getItem(TOKEN_KEY);
  page.definitions = new Map(listed.map((definition) => [definition.name, definition]));
  const select = $("definition");
  select.replaceChildren(...listed.map((definition) => el("option", "", definition.name)));
  pickDefinition(select.value);
  await restoreConversation();
}

function pickDefinition(name) {
  const definition = page.definitions.get(name);
  if (!definition) return;
  $("definition").value = name;
  const states = $("start-state");
  const initial = el("option", "", `${definition.initial_state} (initial)`);
  initial.value = "";
  states.replaceChildren(initial, ...Object.keys(definition.states).map((state) => el("option", "", state)));
  page.definition = definition;
  $("description").textContent = definition.description || "";
  drawGraph();
}

// -- a conversation -------------------------------------------------------------------------------

async function startConversation(event) {
  event.preventDefault();
  if (page.busy) return;
  clearError();
  const definition = page.definitions.get($("definition").value);
  let context = {};
  const text = $("start-context").value.trim();
  if (text) {
    try {
      context = JSON.parse(text);
    } catch (error) {
      showError(new ApiError(0, "invalid_context", `the context is not JSON: ${error.message}`));
      return;
    }
    if (typeof context !== "object" || context === null || Array.isArray(context)) {
      showError(new ApiError(0, "invalid_context", 'the context must be a JSON object, e.g. {"name": "Ann"}'));
      return;
    }
  }
  const body = { definition: definition.name, context, start: false };
  if ($("start-state").value) body.state = $("start-state").value;
  setBusy(true);
  try {
    const created = await (await api("POST", "conversations", body)).json();
    sessionStorage.setItem(CONVERSATION_KEY, created.id);
    page.definition = definition;
    showConversation(created.conversation);
    page.path = [created.conversation.state];
    $("transcript").replaceChildren();
    offerOlder(null);
    $("why").replaceChildren();
    await runTurn(null); // the opening, streamed
  } catch (error) {
    showError(error);
  } finally {
    setBusy(false);
  }
}

async function restoreConversation() {
  const id = sessionStorage.getItem(CONVERSATION_KEY);
  if (!id) return;
  try {
    const conversation = await (await api("GET", `conversations/${encodeURIComponent(id)}`)).json();
    page.definition = page.definitions.get(conversation.definition) || page.definition;
    $("definition").value = conversation.definition;
    $("transcript").replaceChildren();
    for (const exchange of conversation.history) {
      if (exchange.user !== null) addBubble("user", exchange.user);
      addBubble("assistant", exchange.assistant, `in ${exchange.state}`);
    }
    page.path = collapse(conversation.history.map((exchange) => exchange.state));
    if (!page.path.length) page.path = [conversation.state];
    // a stored conversation comes with its history's tail: earlier turns load as you scroll up
    offerOlder(conversation.history_start > 0 ? conversation.history_start : null);
    const note = el("li", "fine", "Earlier turns of this conversation: what they refused is shown only as they run.");
    $("why").replaceChildren(note);
    showConversation(conversation);
  } catch (error) {
    sessionStorage.removeItem(CONVERSATION_KEY); // deleted, expired or another client's: start afresh
    if (error.status !== 404) showError(error);
  }
}

// -- earlier turns: read page by page from GET /conversations/{id}/history ---------------------------

const OLDER_PAGE = 50; // turns per request

function offerOlder(before) {
  page.older = before;
  const offered = $("transcript").querySelector("li.older");
  if (offered) offered.remove();
  if (before === null) return;
  const item = el("li", "older");
  const button = el("button", null, "Show earlier turns");
  button.type = "button";
  button.addEventListener("click", loadOlder);
  item.append(button);
  $("transcript").prepend(item);
}

async function loadOlder() {
  if (page.older === null || page.loadingOlder || !page.conversation) return;
  page.loadingOlder = true;
  try {
    const id = encodeURIComponent(page.conversation.id);
    const query = `before=${page.older}&limit=${OLDER_PAGE}`;
    const older = await (await api("GET", `conversations/${id}/history?${query}`)).json();
    const height = document.documentElement.scrollHeight;
    const first = $("transcript").querySelector("li.older").nextSibling;
    for (const exchange of older.exchanges) {
      if (exchange.user !== null) $("transcript").insertBefore(bubble("user", exchange.user), first);
      $("transcript").insertBefore(bubble("assistant", exchange.assistant, `in ${exchange.state}`), first);
    }
    page.path = collapse([...older.exchanges.map((exchange) => exchange.state), ...page.path]);
    offerOlder(older.next_before);
    showPath();
    // the turns in view stay where they were: the page grew above them
    window.scrollBy(0, document.documentElement.scrollHeight - height);
  } catch (error) {
    showError(error);
  } finally {
    page.loadingOlder = false;
  }
}

function nearTheTop() {
  if (window.scrollY < 80 && page.older !== null) loadOlder();
}

function collapse(states) {
  return states.filter((state, index) => index === 0 || state !== states[index - 1]);
}

async function sendMessage(event) {
  event.preventDefault();
  const text = $("message").value;
  if (!text.trim() || page.busy || !page.conversation) return;
  clearError();
  $("message").value = "";
  setBusy(true);
  const bubble = addBubble("user", text);
  try {
    await runTurn(text);
  } catch (error) {
    bubble.classList.add("failed"); // a failed turn changes nothing: the text goes back to the box
    bubble.title = "not sent: the turn failed";
    $("message").value = text;
    showError(error);
    await refresh().catch(() => {});
  } finally {
    setBusy(false);
  }
}

// One turn over the stream route: the reply's text as it comes, then the turn's result. A workflow's run
// streams several steps: each `step` event finishes its bubble, and the next step's text goes to a new one.
async function runTurn(text) {
  let bubble = streamingBubble();
  let steps = 0;
  try {
    const response = await api("POST", `conversations/${page.conversation.id}/stream`, { message: text });
    let result = null;
    for await (const { name, data } of events(response)) {
      if (name === "delta") bubble.querySelector(".text").textContent += data.text;
      else if (name === "reset") bubble.querySelector(".text").textContent = "";
      else if (name === "tool_call") addNote(bubble, `tool call ${data.name} ${JSON.stringify(data.arguments)}`);
      else if (name === "tool_result") addNote(bubble, toolOutcome(data));
      else if (name === "step") {
        showStep(data, bubble);
        steps += 1;
        bubble = streamingBubble();
      } else if (name === "result") result = data;
      else if (name === "error") throw new ApiError(data.error.status, data.error.type, data.error.message);
    }
    if (!result) throw new ApiError(0, "stream_broken", "the stream ended before the turn's result");
    if (steps) {
      bubble.remove(); // the run's result is its last step's, shown already
      await refresh();
      return;
    }
    bubble.classList.remove("streaming");
    await finishTurn(result, bubble);
  } catch (error) {
    bubble.remove();
    if (!steps) throw error;
    showError(error); // the steps shown are saved: the message was taken, only the run's rest failed
    await refresh().catch(() => {});
  }
}

function streamingBubble() {
  const item = addBubble("assistant", "");
  item.classList.add("streaming");
  return item;
}

function toolOutcome(run) {
  if (run.error) return `tool ${run.name} failed: ${run.error}`;
  return `tool ${run.name} → ${JSON.stringify(run.result)}`;
}

async function resume(result) {
  if (page.busy || !page.conversation || !page.conversation.pending) return;
  clearError();
  setBusy(true);
  try {
    const body = { token: page.conversation.pending.token, result };
    const turn = await (await api("POST", `conversations/${page.conversation.id}/resume`, body)).json();
    addBubble("user", `(resumed with ${JSON.stringify(result)})`).classList.add("resume");
    await finishTurn(turn, addBubble("assistant", ""));
  } catch (error) {
    showError(error);
    await refresh().catch(() => {});
  } finally {
    setBusy(false);
  }
}

function resumeWithData() {
  let data;
  try {
    data = JSON.parse($("resume-data").value);
  } catch (error) {
    showError(new ApiError(0, "invalid_data", `the data to resume with is not JSON: ${error.message}`));
    return;
  }
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    showError(new ApiError(0, "invalid_data", 'the data to resume with must be a JSON object, e.g. {"approved": true}'));
    return;
  }
  resume(data);
}

function deny() {
  const reason = $("deny-reason").value.trim();
  resume(reason ? { approved: false, reason } : { approved: false });
}

async function finishTurn(result, bubble) {
  for (const step of result.steps || []) {
    showStep(step, bubble); // a workflow's run (a resume): a bubble per step, the last one's below
    bubble = addBubble("assistant", "");
  }
  showStep(result, bubble);
  await refresh();
}

// A finished turn, or a step of a workflow's run: its message (an automatic move's says where it went),
// the tools it ran, where it is, and why.
function showStep(result, bubble) {
  bubble.classList.remove("streaming");
  const moved = result.step === "automatic" ? `(moved on to ${result.state})` : "";
  bubble.querySelector(".text").textContent = result.message || moved;
  const kind = result.step ? ` · ${result.step}` : "";
  bubble.querySelector(".meta").textContent = `turn ${result.turn} · in ${result.state}${kind}`;
  if (!bubble.querySelector(".note")) for (const run of result.tool_calls) addNote(bubble, toolOutcome(run));
  if (result.state !== page.path[page.path.length - 1]) page.path.push(result.state);
  addWhy(result);
}

async function refresh() {
  const id = page.conversation.id;
  showConversation(await (await api("GET", `conversations/${id}`)).json());
}

// -- what the page shows --------------------------------------------------------------------------

function bubble(who, text, meta) {
  const item = el("li", who);
  item.append(el("span", "text", text), el("span", "meta", meta || ""));
  return item;
}

function addBubble(who, text, meta) {
  const item = bubble(who, text, meta);
  $("transcript").append(item);
  item.scrollIntoView({ block: "nearest" });
  return item;
}

function addNote(bubble, text) {
  bubble.insertBefore(el("span", "note", text), bubble.querySelector(".meta"));
}

function addWhy(result) {
  const moved = result.previous_state && result.previous_state !== result.state;
  const where = moved ? `${result.previous_state} → ${result.state}` : `in ${result.state}`;
  const calls = `${result.llm_calls} model call${result.llm_calls === 1 ? "" : "s"}`;
  const item = el("li", "", `Turn ${result.turn} (${where}, ${calls})`);
  item.dataset.turn = result.turn;
  const list = el("ul");
  for (const rejection of result.rejected) {
    const line = el("li", "refused");
    const about = [rejection.target_state && `→ ${rejection.target_state}`, rejection.key && `key ${rejection.key}`];
    const attempt = rejection.attempt > 1 ? ` (attempt ${rejection.attempt})` : "";
    line.append(el("span", "kind", rejection.kind), ` ${about.filter(Boolean).join(", ")}: ${rejection.reason}${attempt}`);
    list.append(line);
  }
  if (!result.rejected.length) list.append(el("li", "fine", "nothing refused"));
  if (result.status === "paused") list.append(el("li", "fine", `paused: ${result.pending.reason}`));
  item.append(list);
  $("why").append(item);
}

function showConversation(conversation) {
  page.conversation = conversation;
  const id = conversation.id.slice(0, 8);
  $("status").textContent = `${conversation.definition} · conversation ${id} · ${whereIn(conversation)} · ${conversation.status}`;
  showContext(conversation);
  showMemory(conversation);
  showPending(conversation.pending);
  $("ended").hidden = !conversation.ended;
  $("ended").textContent = `The conversation has ended in state ${conversation.state}.`;
  showPath();
  drawGraph();
  setBusy(page.busy);
}

// "state ask_policy", or inside sub-conversations "claim › identity_check: ask_dob" (the stack, root first)
function whereIn(conversation) {
  const stack = conversation.stack || [];
  if (stack.length < 2) return `state ${conversation.state}`;
  return `${stack.map((frame) => frame.definition).join(" › ")}: ${stack[stack.length - 1].state}`;
}

function showContext(conversation) {
  const rows = Object.entries(conversation.context).map(([key, value]) => {
    const origin = conversation.provenance[key] || {};
    const row = el("tr");
    row.dataset.key = key;
    row.append(el("td", "", key), el("td", "value", json(value)), el("td", "", origin.by || "?"));
    row.append(el("td", "", origin.turn ?? ""));
    return row;
  });
  if (!rows.length) {
    const empty = el("td", "empty", "empty");
    empty.colSpan = 4;
    rows.push(el("tr"));
    rows[0].append(empty);
  }
  $("context").tBodies[0].replaceChildren(...rows);
}

// The working memory's slots and the running summary (absent from servers older than this page).
function showMemory(conversation) {
  const memory = conversation.memory || {};
  const summary = conversation.summary || { text: "" };
  $("memory-section").hidden = !Object.keys(memory).length && !summary.text;
  const rows = Object.entries(memory).map(([slot, text]) => {
    const row = el("tr");
    row.dataset.slot = slot;
    row.append(el("td", "", slot), el("td", "value", text || "(empty)"));
    return row;
  });
  $("memory").tBodies[0].replaceChildren(...rows);
  const failed = summary.error ? ` (the last summary call failed: ${summary.error})` : "";
  $("summary").textContent = (summary.text || "none yet") + failed;
}

function showPending(pending) {
  $("pending").hidden = !pending;
  if (!pending) return;
  const tool = pending.kind === "tool_approval" && pending.tool_call;
  $("pending-reason").textContent = tool
    ? `The model wants to call the tool ${tool.name}: ${pending.reason}`
    : `Paused by ${pending.handler || "a handler"} in ${pending.state}: ${pending.reason}`;
  const detail = tool ? { arguments: tool.arguments } : pending.payload;
  $("pending-detail").textContent = json(detail);
  $("pending-detail").hidden = !detail || !Object.keys(detail).length;
}

function showPath() {
  const current = page.conversation && page.conversation.state;
  const parts = [];
  page.path.forEach((state, index) => {
    if (index) parts.push(" → ");
    parts.push(el("span", index === page.path.length - 1 && state === current ? "state current" : "state", state));
  });
  $("path").replaceChildren(...(parts.length ? parts : ["none yet"]));
}

function setBusy(busy) {
  page.busy = busy;
  const conversation = page.conversation;
  const open = conversation && !conversation.ended && conversation.status !== "paused";
  $("message").disabled = busy || !open;
  $("send").disabled = busy || !open;
  $("start").disabled = busy;
  for (const id of ["approve", "deny", "resume-custom"]) $(id).disabled = busy;
  $("message").placeholder = !conversation
    ? "Start a conversation first"
    : conversation.ended
      ? "The conversation has ended"
      : conversation.status === "paused"
        ? "Answer the pause above first"
        : "Your message (Enter sends, Shift+Enter: a new line)";
}

// -- the graph --------------------------------------------------------------------------------------

// Mermaid numbers a diagram's arrows in the order its text declares them: which states each joins.
function arrows(mermaidText) {
  const found = [];
  for (const line of mermaidText.split("\n")) {
    const match = /^\s*(\[\*\]|s\d+) --> (\[\*\]|s\d+)\s*(:|$)/.exec(line);
    if (match) found.push(`${match[1]}>${match[2]}`);
  }
  return found;
}

async function drawGraph() {
  const definition = page.definition;
  const target = $("graph");
  if (!definition) return;
  if (!window.mermaid) {
    target.replaceChildren(el("p", "empty", "The graph cannot be drawn: Mermaid did not load."));
    return;
  }
  const ids = definition.mermaid_ids;
  const conversation = page.conversation && page.conversation.definition === definition.name ? page.conversation : null;
  const current = conversation && conversation.state;
  const path = conversation ? page.path : [];
  const lines = [definition.mermaid.trimEnd()];
  lines.push("    classDef visited fill:#dbeafe,stroke:#1d4ed8");
  lines.push("    classDef current fill:#fde68a,stroke:#b45309,stroke-width:3px");
  const visited = [...new Set(path)].filter((state) => state !== current && ids[state]);
  if (visited.length) lines.push(`    class ${visited.map((state) => ids[state]).join(",")} visited`);
  if (current && ids[current]) lines.push(`    class ${ids[current]} current`);
  const taken = new Set(path.slice(1).map((state, index) => `${ids[path[index]]}>${ids[state]}`));
  if (path[0] === definition.initial_state) taken.add(`[*]>${ids[path[0]]}`);
  if (conversation && conversation.ended) taken.add(`${ids[current]}>[*]`);

  const drawing = ++page.drawing;
  let svg;
  try {
    ({ svg } = await window.mermaid.render(`graph-svg-${drawing}`, lines.join("\n") + "\n"));
  } catch (error) {
    if (drawing === page.drawing) target.replaceChildren(el("p", "empty", `The graph cannot be drawn: ${error.message}`));
    return;
  }
  if (drawing !== page.drawing) return; // a newer drawing was asked for meanwhile
  target.innerHTML = svg; // Mermaid's SVG of the definition's graph (sanitised by Mermaid); no conversation text
  const order = arrows(definition.mermaid);
  for (const edge of target.querySelectorAll("path[data-id^='edge']")) {
    if (taken.has(order[Number(edge.dataset.id.slice(4))])) edge.classList.add("taken");
  }
  target.dataset.current = current || "";
}

// -- wiring -----------------------------------------------------------------------------------------

function wire() {
  if (window.mermaid) window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });
  $("definition").addEventListener("change", (event) => pickDefinition(event.target.value));
  $("start-form").addEventListener("submit", startConversation);
  $("message-form").addEventListener("submit", sendMessage);
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("message-form").requestSubmit();
    }
  });
  $("pending-form").addEventListener("submit", (event) => {
    event.preventDefault();
    resume({ approved: true });
  });
  $("deny").addEventListener("click", deny);
  $("resume-custom").addEventListener("click", resumeWithData);
  $("token-form").addEventListener("submit", useToken);
  $("forget-token").addEventListener("click", forgetToken);
  $("error-close").addEventListener("click", clearError);
  window.addEventListener("scroll", nearTheTop, { passive: true });
  $("show-labels").addEventListener("change", (event) => {
    $("graph").classList.toggle("no-labels", !event.target.checked);
  });
  loadDefinitions();
}

wire();
