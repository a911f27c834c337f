/// The web page (`kaiten ui`): three files served from the binary, no build step, nothing fetched
/// from elsewhere. The page holds no data; it reads and changes everything through `/rest/` with
/// its session cookie and the CSRF token of its load, and puts every name into the page as text
/// (a file called `<script>` is shown, never run).
enum UIPage {
    static func asset(_ path: String) -> APIResponse? {
        switch path {
        case "/ui", "/ui/", "/ui/index.html": return APIResponse(status: 200, contentType: "text/html; charset=utf-8", body: Array(html.utf8), headers: security)
        case "/ui/app.js": return APIResponse(status: 200, contentType: "text/javascript; charset=utf-8", body: Array(script.utf8), headers: security)
        case "/ui/app.css": return APIResponse(status: 200, contentType: "text/css; charset=utf-8", body: Array(style.utf8), headers: security)
        default: return nil
        }
    }

    /// Only the page's own files run; nothing is framed or fetched from elsewhere. Images and
    /// media also come from the service's on-demand server on loopback (signed links).
    static let security: [APIResponse.Header] = [
        .init("Content-Security-Policy", "default-src 'self'; img-src 'self' data: http://127.0.0.1:*; media-src 'self' http://127.0.0.1:*; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
    ]

    static let html = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Kaiten</title>
        <link rel="stylesheet" href="/ui/app.css">
        <script src="/ui/app.js" defer></script>
        </head>
        <body>
        <header>
          <h1>Kaiten</h1>
          <label>Folder <select id="folder" aria-label="Folder"></select></label>
          <span id="totals" aria-live="polite"></span>
        </header>
        <main>
          <section aria-labelledby="tree-title">
            <h2 id="tree-title">Global tree <span id="where"></span></h2>
            <p class="hint">Tick what this device keeps: each tick is a line of the selection file. Nothing moves until you apply the plan.</p>
            <form id="search" role="search">
              <input type="search" id="q" name="q" placeholder="Name, or a glob such as *.jpg" aria-label="Search the folder by name">
              <select id="search-type" aria-label="Type">
                <option value="">Any type</option><option value="file">Files</option><option value="directory">Directories</option><option value="symlink">Links</option>
              </select>
              <input type="text" id="search-min" inputmode="decimal" size="8" placeholder="min size" aria-label="Smallest size, such as 10M">
              <label>modified from <input type="date" id="search-after" aria-label="Modified on or after"></label>
              <button type="submit">Search</button>
              <button type="button" id="search-clear">Clear</button>
            </form>
            <p id="search-summary" aria-live="polite"></p>
            <p><button type="button" id="view-grid" aria-pressed="false">Photo grid</button></p>
            <div id="grid" hidden></div>
            <table id="tree">
              <thead><tr><th scope="col">Keep</th><th scope="col" data-sort="name" aria-sort="ascending"><button type="button" class="sort">Name</button></th><th scope="col" data-sort="size"><button type="button" class="sort">Size</button></th><th scope="col" data-sort="modified"><button type="button" class="sort">Modified</button></th><th scope="col">Here</th><th scope="col">Peers</th></tr></thead>
              <tbody></tbody>
            </table>
          </section>
          <section id="viewer" aria-labelledby="viewer-title" hidden>
            <h2 id="viewer-title"></h2>
            <div id="viewer-body"></div>
            <button type="button" id="viewer-close">Close</button>
          </section>
          <section aria-labelledby="plan-title">
            <h2 id="plan-title">Plan</h2>
            <p id="plan-summary" aria-live="polite">No changes planned.</p>
            <ul id="plan"></ul>
            <button id="apply" type="button" disabled>Apply this plan</button>
            <p id="outcome" role="status"></p>
          </section>
          <section aria-labelledby="conflicts-title">
            <h2 id="conflicts-title">To settle</h2>
            <p id="conflicts-summary" aria-live="polite"></p>
            <ul id="conflicts"></ul>
          </section>
          <section aria-labelledby="peers-title">
            <h2 id="peers-title">Peers</h2>
            <table id="peers">
              <thead><tr><th scope="col">Peer</th><th scope="col">Connection</th><th scope="col">Holds of this folder</th></tr></thead>
              <tbody></tbody>
            </table>
          </section>
          <section aria-labelledby="rounds-title">
            <h2 id="rounds-title">The service's last rounds</h2>
            <ol id="rounds" reversed></ol>
          </section>
        </main>
        </body>
        </html>

        """

    static let style = """
        :root { font-family: system-ui, sans-serif; color-scheme: light dark; }
        body { margin: 0; }
        header { display: flex; flex-wrap: wrap; gap: 1em; align-items: center; padding: .5em 1em; border-bottom: 1px solid #8884; }
        h1 { font-size: 1.2em; margin: 0; }
        h2 { font-size: 1em; }
        main { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 1em; padding: 0 1em 1em; }
        @media (max-width: 700px) { main { grid-template-columns: 1fr; } th:nth-child(4), td:nth-child(4) { display: none; } }
        table { width: 100%; border-collapse: collapse; }
        th, td { text-align: left; padding: .25em .5em; border-bottom: 1px solid #8882; overflow-wrap: anywhere; }
        td.size { text-align: right; white-space: nowrap; }
        img.thumb { width: 48px; height: 48px; object-fit: cover; vertical-align: middle; margin-right: .5em; }
        #grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(140px, 1fr)); gap: .5em; }
        #grid .tile { display: flex; flex-direction: column; align-items: center; gap: .25em; background: none; border: 1px solid #8884; padding: .25em; font: inherit; cursor: pointer; overflow: hidden; }
        #grid .tile img { width: 128px; height: 128px; object-fit: cover; }
        #grid .tile span { max-width: 100%; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
        button[aria-pressed="true"] { background: Highlight; color: HighlightText; }
        #viewer img, #viewer video { max-width: 100%; max-height: 70vh; display: block; }
        button.open { background: none; border: none; padding: 0; font: inherit; color: inherit; cursor: pointer; text-align: left; text-decoration: underline dotted; }
        button.dir { background: none; border: none; padding: 0; font: inherit; color: LinkText; cursor: pointer; text-align: left; }
        button.dir:focus-visible, input:focus-visible, button:focus-visible { outline: 2px solid Highlight; }
        button.sort { background: none; border: none; padding: 0; font: inherit; font-weight: bold; cursor: pointer; }
        th[aria-sort="ascending"] button.sort::after { content: " ▲"; } th[aria-sort="descending"] button.sort::after { content: " ▼"; }
        .hint { color: GrayText; font-size: .9em; }
        #search { display: flex; flex-wrap: wrap; gap: .5em; margin-bottom: .5em; }
        #search input { flex: 1 1 12em; min-width: 0; }
        #plan li { font-family: ui-monospace, monospace; font-size: .9em; }
        .state-in-sync { color: green; } .state-absent { color: GrayText; } .state-differs, .state-extraneous { color: darkorange; }

        """

    static let script = """
        "use strict";
        // Every request carries the CSRF token the page's load was given (its cookie), and the
        // session cookie the browser sends by itself. Names go into the page as text only.
        function csrf() {
          for (const part of document.cookie.split(";")) {
            const [name, value] = part.trim().split("=");
            if (name.startsWith("CSRF-Token-")) return [name.replace("CSRF-Token-", "X-CSRF-Token-"), value];
          }
          return null;
        }
        async function api(path, options = {}) {
          const token = csrf();
          const headers = Object.assign({}, options.headers || {});
          if (token) headers[token[0]] = token[1];
          const response = await fetch(path, Object.assign({}, options, { headers, credentials: "same-origin" }));
          const text = await response.text();
          if (!response.ok) throw new Error(text.trim() || response.statusText);
          return text ? JSON.parse(text) : null;
        }
        function el(tag, attributes = {}, text) {
          const node = document.createElement(tag);
          for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
          if (text !== undefined) node.textContent = text;
          return node;
        }
        function size(bytes) {
          const units = ["B", "KiB", "MiB", "GiB", "TiB"];
          let value = bytes, unit = 0;
          while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
          return (unit === 0 ? value : value.toFixed(1)) + " " + units[unit];
        }
        const state = { folder: null, directory: "", search: null, sort: { key: "name", descending: false } };

        // Directories first (as a file manager lists them), then by the chosen column.
        function sorted(entries) {
          const { key, descending } = state.sort;
          const value = (entry) => key === "size" ? entry.size : key === "modified" ? entry.modified : entry.path.toLowerCase();
          return [...entries].sort((a, b) => {
            const dirs = (b.type === "directory") - (a.type === "directory");
            if (dirs !== 0) return dirs;
            const x = value(a), y = value(b);
            const order = x < y ? -1 : x > y ? 1 : 0;
            return descending ? -order : order;
          });
        }
        function sortBy(key) {
          state.sort = { key, descending: state.sort.key === key ? !state.sort.descending : key !== "name" };
          for (const th of document.querySelectorAll("th[data-sort]")) {
            if (th.dataset.sort === key) th.setAttribute("aria-sort", state.sort.descending ? "descending" : "ascending");
            else th.removeAttribute("aria-sort");
          }
          return open(state.folder, state.directory);
        }
        const q = (id) => document.getElementById(id);

        async function loadFolders() {
          const folders = await api("/rest/config/folders");
          const select = q("folder");
          select.replaceChildren(...folders.map((f) => el("option", { value: f.id }, f.label ? f.label + " (" + f.id + ")" : f.id)));
          select.addEventListener("change", () => open(select.value, ""));
          if (folders.length) await open(folders[0].id, "");
        }

        // The peers' completion and the service's rounds are asked for when a folder is shown
        // and after the page applies or settles, not at every directory opened: each peer's
        // completion walks the folder's index.
        async function open(folder, directory, refreshSide = false) {
          if (state.search !== null && folder === state.folder) return search(state.search.text, state.search.type, state.search.min, state.search.after);
          state.folder = folder; state.directory = directory; state.search = null;
          // The directory opened last is the one shown: an open still waiting for its answers
          // (the refresh after an apply) must not paint over one the user started since.
          const turn = state.opening = (state.opening || 0) + 1;
          q("search-summary").textContent = "";
          q("where").textContent = directory ? "/ " + directory : "";
          const status = await api("/rest/db/status?folder=" + encodeURIComponent(folder));
          if (turn !== state.opening) return;
          q("totals").textContent = status.globalFiles + " files, " + size(status.globalBytes) + " in all; needed here: " + status.needFiles + " (" + size(status.needBytes) + ")";
          const listing = await api("/rest/kaiten/ls?folder=" + encodeURIComponent(folder) + "&dir=" + encodeURIComponent(directory));
          if (turn !== state.opening) return;
          const rows = [];
          if (directory) {
            const up = el("tr");
            const parent = directory.includes("/") ? directory.slice(0, directory.lastIndexOf("/")) : "";
            const button = el("button", { class: "dir", type: "button" }, "..");
            button.addEventListener("click", () => open(folder, parent));
            const cell = el("td", { colspan: "6" }); cell.append(button); up.append(cell);
            rows.push(up);
          }
          for (const entry of sorted(listing.entries)) rows.push(row(entry));
          q("tree").tBodies[0].replaceChildren(...rows);
          state.entries = listing.entries;
          const side = refreshSide || state.sideShownFor !== folder;
          state.sideShownFor = folder;
          await Promise.all([showPlan(), showThumbnails(folder, directory), side ? showPeers().catch((error) => {
            q("peers").tBodies[0].replaceChildren(el("tr", {}, String(error.message)));
          }) : null, side ? showRounds().catch((error) => { q("rounds").replaceChildren(el("li", {}, String(error.message))); }) : null]);
        }

        // "10M", "1.5 GiB", "2048": bytes (K, M, G, T are powers of 1024, as the sizes shown).
        function bytes(text) {
          const match = /^\\s*(\\d+(?:\\.\\d+)?)\\s*([KMGT]?)(?:i?B)?\\s*$/i.exec(text);
          if (!match) throw new Error("not a size: " + text + " (such as 500K, 10M or 2G)");
          return Math.round(parseFloat(match[1]) * Math.pow(1024, " KMGT".indexOf(match[2].toUpperCase() || " ")));
        }

        // The global index searched by name (a glob, or text anywhere in the path), type, size
        // and date: the matches replace the directory's rows, each with its whole path and tick.
        async function search(text, type, min = "", after = "") {
          if (!text.trim() && !type && !min.trim() && !after) { state.search = null; return open(state.folder, state.directory); }
          state.search = { text, type, min, after };
          state.opening = (state.opening || 0) + 1;
          const started = performance.now();
          let query = "/rest/kaiten/search?folder=" + encodeURIComponent(state.folder) + "&q=" + encodeURIComponent(text) + "&type=" + encodeURIComponent(type);
          if (min.trim()) query += "&min=" + bytes(min);
          if (after) query += "&after=" + Math.floor(Date.parse(after + "T00:00:00Z") / 1000);
          const found = await api(query);
          q("where").textContent = "";
          q("tree").tBodies[0].replaceChildren(...sorted(found.entries).map((entry) => row(entry, true)));
          // The grid shows the matches too (without thumbnails: those are signed per directory).
          state.entries = found.entries; state.thumbs = {};
          showGrid();
          const took = Math.round(performance.now() - started);
          q("search-summary").textContent = found.total + " match(es)" + (found.truncated ? ", the first " + found.entries.length + " shown" : "") + " (" + took + " ms)";
          q("search-summary").dataset.took = String(took);
          q("search-summary").dataset.total = String(found.total);
          await showPlan();
        }

        function row(entry, wholePath = false) {
          const tr = el("tr", { "data-path": entry.path });
          const keep = el("input", { type: "checkbox", "data-select": entry.path, "aria-label": "Keep " + entry.path });
          keep.checked = entry.selected !== "no";
          keep.disabled = entry.selected === "parent";
          keep.addEventListener("change", () => toggle(entry.path, keep.checked));
          const name = wholePath ? entry.path : entry.path.slice(entry.path.lastIndexOf("/") + 1);
          const nameCell = el("td");
          if (entry.type === "directory") {
            const button = el("button", { class: "dir", type: "button" }, name + "/");
            button.addEventListener("click", () => { state.search = null; open(state.folder, entry.path); });
            nameCell.append(button);
          } else if (entry.type === "file") {
            const button = el("button", { class: "open", type: "button", "aria-label": "Open " + entry.path }, name);
            button.addEventListener("click", () => view(entry.path));
            nameCell.append(button);
          } else {
            nameCell.textContent = name;
          }
          const keepCell = el("td"); keepCell.append(keep);
          tr.append(keepCell, nameCell, el("td", { class: "size" }, entry.type === "directory" ? "" : size(entry.size)),
            el("td", {}, entry.modified), el("td", { class: "state-" + (entry.local || "unknown") }, entry.local || ""),
            el("td", {}, String(Array.isArray(entry.peers) ? entry.peers.length : entry.peers)));
          return tr;
        }

        // Thumbnails of the directory's images and videos (Sushitrain's cache, made on demand from
        // as few of the peers' blocks as it takes): beside each name, and as tiles in the grid.
        // The on-demand server listens on loopback: a page served from elsewhere (or over HTTPS,
        // where plain-HTTP media is mixed content) reaches its signed links through its own
        // origin, /ondemand/, which passes them on.
        const direct = location.protocol === "http:" && /^(127\\.|localhost$|\\[::1\\]$)/.test(location.hostname);
        function reach(url) {
          if (direct) return url;
          const u = new URL(url);
          return "/ondemand" + u.pathname + u.search;
        }

        async function showThumbnails(folder, directory) {
          state.thumbs = {};
          try {
            const links = (await api("/rest/kaiten/thumbs?folder=" + encodeURIComponent(folder) + "&dir=" + encodeURIComponent(directory) + "&size=255")).links;
            for (const [path, url] of Object.entries(links)) state.thumbs[path] = reach(url);
          } catch (error) { /* no on-demand server: names only */ }
          for (const tr of q("tree").tBodies[0].rows) {
            const url = tr.dataset.path && state.thumbs[tr.dataset.path];
            if (!url) continue;
            tr.cells[1].prepend(el("img", { class: "thumb", src: url, alt: "", loading: "lazy", width: "48", height: "48" }));
          }
          showGrid();
        }
        function showGrid() {
          const grid = q("grid");
          const on = q("view-grid").getAttribute("aria-pressed") === "true";
          grid.hidden = !on;
          q("tree").hidden = on;
          if (!on) { grid.replaceChildren(); return; }
          const tiles = [];
          for (const entry of sorted(state.entries || [])) {
            if (entry.type !== "file") continue;
            const url = state.thumbs && state.thumbs[entry.path];
            const tile = el("button", { type: "button", class: "tile", "data-path": entry.path, "aria-label": "Open " + entry.path });
            if (url) tile.append(el("img", { src: url, alt: "", loading: "lazy" }));
            tile.append(el("span", {}, entry.path.slice(entry.path.lastIndexOf("/") + 1)));
            tile.addEventListener("click", () => view(entry.path));
            tiles.push(tile);
          }
          grid.replaceChildren(...tiles);
        }

        // A file opened without keeping it: shown, played (the player's ranges fetch only what
        // it reads, every block verified) or downloaded under its own name.
        const kinds = {
          img: /\\.(jpe?g|png|gif|webp|avif|bmp)$/i,
          video: /\\.(mp4|m4v|webm|mov|mkv|ogv)$/i,
          audio: /\\.(mp3|m4a|aac|oga|ogg|opus|flac|wav)$/i,
        };
        async function view(path) {
          const name = path.slice(path.lastIndexOf("/") + 1);
          q("viewer-title").textContent = path;
          q("viewer").hidden = false;
          let link;
          try {
            link = await api("/rest/kaiten/link?folder=" + encodeURIComponent(state.folder) + "&path=" + encodeURIComponent(path));
          } catch (error) {
            q("viewer-body").replaceChildren(el("p", { class: "error" }, String(error.message)));
            return;
          }
          const parts = [];
          for (const [tag, pattern] of Object.entries(kinds)) {
            if (!pattern.test(name)) continue;
            parts.push(tag === "img" ? el("img", { src: reach(link.url), alt: name }) : el(tag, { src: reach(link.url), controls: "", preload: "metadata" }));
          }
          const download = el("a", { id: "download", href: reach(link.url) + "&download=1" }, "Download " + name);
          const line = el("p"); line.append(download);
          parts.push(line);
          q("viewer-body").replaceChildren(...parts);
          q("viewer").scrollIntoView({ block: "nearest" });
        }
        function closeViewer() {
          q("viewer").hidden = true;
          q("viewer-body").replaceChildren();
        }

        async function toggle(path, keep) {
          q("outcome").textContent = "";
          try {
            await api("/rest/kaiten/" + (keep ? "select" : "deselect") + "?folder=" + encodeURIComponent(state.folder), {
              method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ paths: [path] }),
            });
          } catch (error) { q("outcome").textContent = String(error.message); }
          await open(state.folder, state.directory);
        }

        let shownPlan = null;
        async function showPlan() {
          const plan = await api("/rest/kaiten/plan?folder=" + encodeURIComponent(state.folder));
          shownPlan = plan;
          const folder = (plan.folders || [])[0] || { actions: [], conflicts: [] };
          const items = folder.actions.map((a) => el("li", { "data-action": a.action, "data-path": a.path }, a.action + " " + a.path + (a.reason ? " — " + a.reason : "")));
          for (const c of folder.conflicts || []) items.push(el("li", { "data-conflict": c.kind }, "conflict " + c.path + " — " + c.reason));
          q("plan").replaceChildren(...items);
          q("plan-summary").textContent = folder.actions.length ? folder.actions.length + " change(s) planned." : "In sync: no changes planned.";
          q("apply").disabled = folder.actions.length === 0;
          showConflicts(folder.conflicts || []);
        }

        // Each open conflict of the plan with its choices: one click settles it through the same
        // code as `kaiten resolve`.
        const choiceWords = { select: "Keep it and select it", keep: "Keep it here, unselected", "delete-local": "Delete the local copy", "use-global": "Take the peers' version" };
        function showConflicts(conflicts) {
          const items = conflicts.map((c) => {
            const li = el("li", { "data-path": c.path, "data-kind": c.kind });
            li.append(el("span", {}, c.kind + " " + c.path + " — " + c.reason + " "));
            for (const choice of c.choices || []) {
              const button = el("button", { type: "button", "data-choice": choice }, choiceWords[choice] || choice);
              button.addEventListener("click", () => settle(c.path, choice));
              li.append(button);
            }
            return li;
          });
          q("conflicts").replaceChildren(...items);
          q("conflicts-summary").textContent = items.length ? items.length + " to settle." : "Nothing to settle.";
        }
        async function settle(path, choice) {
          try {
            const outcome = await api("/rest/kaiten/resolve?folder=" + encodeURIComponent(state.folder), {
              method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ path, choice }),
            });
            q("conflicts-summary").textContent = path + ": " + (outcome.outcome || "settled") + ".";
          } catch (error) { q("conflicts-summary").textContent = String(error.message); }
          await open(state.folder, state.directory, true);
        }

        // The folder's peers: connected or not (and where), and how much of the folder each holds.
        async function showPeers() {
          const [devices, connections, folders] = await Promise.all([
            api("/rest/config/devices"), api("/rest/system/connections"), api("/rest/config/folders"),
          ]);
          const folder = folders.find((f) => f.id === state.folder);
          const shared = new Set(((folder && folder.devices) || []).map((d) => d.deviceID));
          const rows = [];
          for (const device of devices) {
            if (!shared.has(device.deviceID) || !(device.deviceID in (connections.connections || {}))) continue;
            const c = connections.connections[device.deviceID];
            let holds = "";
            try {
              const completion = await api("/rest/db/completion?folder=" + encodeURIComponent(state.folder) + "&device=" + encodeURIComponent(device.deviceID));
              holds = Math.floor(completion.completion) + " %" + (completion.needItems ? ", " + completion.needItems + " item(s) to get" : "");
            } catch (error) { holds = String(error.message); }
            const tr = el("tr", { "data-device": device.deviceID });
            tr.append(el("td", {}, device.name || device.deviceID.slice(0, 7)),
              el("td", { class: c.connected ? "connected" : "disconnected" }, c.connected ? "connected, " + c.address : "not connected"),
              el("td", {}, holds));
            rows.push(tr);
          }
          q("peers").tBodies[0].replaceChildren(...rows);
        }

        // What the service did on its own: each round's plan, what it applied, what it held back
        // (not admitted by its apply mode, or stopped by a brake) and why a round failed.
        async function showRounds() {
          const rounds = await api("/rest/kaiten/rounds");
          q("rounds").replaceChildren(...rounds.map((r) => el("li", { "data-number": String(r.number), "data-pending": String(r.pending) },
            "#" + r.number + " at " + r.at + ": " + r.planned + " planned, " + r.applied + " applied, " + r.pending + " held back, "
              + r.failed + " failed, " + r.conflicts + " conflict(s)" + (r.error ? " — " + r.error : ""))));
        }

        // The apply runs as one request; meanwhile its progress is asked for and shown.
        async function applyPlan() {
          q("apply").disabled = true;
          q("outcome").textContent = "Applying…";
          q("outcome").dataset.progress = "";
          let polling = true;
          const poll = (async () => {
            while (polling) {
              await new Promise((done) => setTimeout(done, 250));
              if (!polling) break;
              try {
                const p = await api("/rest/kaiten/apply/progress");
                if (!polling || !p.running) continue;
                const files = p.files_total ? p.files_done + " of " + p.files_total + " file(s), " + size(p.bytes_done) + " of " + size(p.bytes_total) : "";
                q("outcome").textContent = "Applying… " + p.done + " of " + p.actions + " change(s)" + (files ? "; " + files : "") + (p.current ? " — " + p.current : "");
                q("outcome").dataset.progress = p.bytes_done + "/" + p.bytes_total;
              } catch (error) { /* the answer says how it ended */ }
            }
          })();
          try {
            const outcome = await api("/rest/kaiten/apply", {
              method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(shownPlan),
            });
            polling = false;
            await poll;
            q("outcome").textContent = outcome.exit === 0 ? "Applied." : "Ended with exit " + outcome.exit + ": " + (outcome.message || "");
          } catch (error) { polling = false; await poll; q("outcome").textContent = String(error.message); }
          await open(state.folder, state.directory, true);
        }

        document.addEventListener("DOMContentLoaded", () => {
          q("apply").addEventListener("click", applyPlan);
          q("viewer-close").addEventListener("click", closeViewer);
          q("view-grid").addEventListener("click", () => {
            const button = q("view-grid");
            button.setAttribute("aria-pressed", button.getAttribute("aria-pressed") === "true" ? "false" : "true");
            showGrid();
          });
          for (const th of document.querySelectorAll("th[data-sort]")) {
            th.querySelector("button").addEventListener("click", () => sortBy(th.dataset.sort).catch((error) => { q("outcome").textContent = String(error.message); }));
          }
          q("search").addEventListener("submit", (event) => {
            event.preventDefault();
            search(q("q").value, q("search-type").value, q("search-min").value, q("search-after").value)
              .catch((error) => { q("search-summary").textContent = String(error.message); });
          });
          q("search-clear").addEventListener("click", () => {
            q("q").value = ""; q("search-type").value = ""; q("search-min").value = ""; q("search-after").value = ""; state.search = null;
            open(state.folder, state.directory).catch((error) => { q("outcome").textContent = String(error.message); });
          });
          loadFolders().catch((error) => { q("outcome").textContent = String(error.message); });
        });

        """
}
