import KaitenIndex
import KaitenProtocol
import KaitenScan

/// Walks one folder's global and local entries and sorts each into actions, conflicts and junk.
struct Builder {
    let input: FolderInput
    let selection: Selection
    var pulls: [Action] = []
    var deletes: [Action] = []
    var mkdirs: [String: Action] = [:]
    var chmods: [Action] = []
    /// Local changes announced to the peers (folders that send).
    var sends: [Action] = []
    var sendDeletes: [Action] = []
    /// Local files the peers replaced by a directory (deleted before the pulls).
    var replacedFiles: Set<String> = []
    /// Local directories where the global index has a file now: the pull that replaces each.
    var replacedDirectories: [String: Action] = [:]
    var conflicts: [Conflict] = []
    var junk: [String] = []
    var warnings: [String] = []
    /// Local directories whose global entry is deleted while they are selected.
    var deletedSelectedDirectories: Set<String> = []
    /// Device IDs as text, computed once each (base32 and check characters are not free).
    var deviceNames: [DeviceID: String] = [:]
    var shortIDNames: [UInt64: String] = [:]

    mutating func names(_ devices: [DeviceID]) -> [String] {
        devices.map { device in
            if let name = deviceNames[device] { return name }
            let name = device.description
            deviceNames[device] = name
            return name
        }
    }

    mutating func describe(_ version: BEPVector) -> [String] {
        version.counters.map { counter in
            let id = shortIDNames[counter.id] ?? DeviceID.shortIDString(counter.id)
            shortIDNames[counter.id] = id
            return "\(id):\(counter.value)"
        }
    }

    /// The part of the index the selection reaches (computed once per plan).
    let coverage: Selection.Coverage

    init(input: FolderInput, selection: Selection) {
        self.input = input
        self.selection = selection
        coverage = selection.coverage
    }

    /// Paths the user chose to keep as they are (`kaiten resolve --keep`): while their content is
    /// what it was then, they are listed as kept, not as conflicts.
    var kept: [String] = []

    /// Selected, live global files by content, made on first use (only deletions on the peers
    /// of unselected files ask).
    private var selectedByContent: [ContentHash: GlobalEntry]?

    private mutating func selectedGlobal(withContent hash: ContentHash) -> GlobalEntry? {
        if selectedByContent == nil {
            var index: [ContentHash: GlobalEntry] = [:]
            let selection = self.selection
            input.global.forEachGlobal(covering: coverage) { entry in
                guard !entry.file.isDeleted, entry.file.type == .file, selection.isSelected(entry.path),
                    let content = Reconciler.contentHash(of: entry.file)
                else { return }
                index[content] = entry
            }
            selectedByContent = index
        }
        return selectedByContent?[hash]
    }

    mutating func addConflict(_ conflict: Conflict) {
        if let hash = input.kept[conflict.path], let mine = input.local[conflict.path], Reconciler.contentHash(of: mine) == hash {
            kept.append(conflict.path)
        } else {
            conflicts.append(conflict)
        }
    }

    static let extraneousChoices: [Conflict.Choice] = [.select, .deleteLocal, .keep]
    static let shadowedChoices: [Conflict.Choice] = [.useGlobal, .deleteLocal, .keep]
    static let localEditChoices: [Conflict.Choice] = [.useGlobal, .select, .keep]
    static let lastCopyChoices: [Conflict.Choice] = [.select, .deleteLocal, .keep]
    static let concurrentChoices: [Conflict.Choice] = [.useGlobal, .keep]
    /// The global version is a deletion: there is nothing to use instead; accept it or keep the file.
    static let deletedGloballyChoices: [Conflict.Choice] = [.deleteLocal, .keep]

    mutating func classify() {
        let local = input.local
        if let scope = input.scope {
            // Only the paths named (and their parents): what a peer's update or a change on
            // disk touched. Every rule below looks at one path at a time.
            for path in scope {
                if let g = input.global.global(path) {
                    classify(global: g, local: local[path])
                } else {
                    classifyNotGlobal(path, local: local[path])
                }
            }
            return
        }
        // The selected part of the index, then every local path: a global path neither
        // selected nor here plans to nothing, so a plan over a million-path index with a
        // snapshot reads what is selected and what is on disk, not the million.
        input.global.forEachGlobal(covering: coverage) { g in
            classify(global: g, local: local[g.path])
        }
        for file in local.files {
            let path = file.path
            if let g = input.global.global(path) {
                if !coverage.covers(path) { classify(global: g, local: file) }
            } else {
                classifyNotGlobal(path, local: file)
            }
        }
        if input.sends {
            for (path, _) in input.announced where local[path] == nil && input.global.global(path) == nil {
                classifyNotGlobal(path, local: nil)
            }
        }
    }

    /// A path no peer announced: a local-only file (new here, or extraneous), or, in a folder
    /// that sends, one this device announced and that is gone from disk (deleted here).
    private mutating func classifyNotGlobal(_ path: String, local file: LocalFile?) {
        guard let file else {
            // Announced here, never announced by a peer, and gone from disk: deleted here.
            if input.sends, let entry = input.announced[path], selection.isSelected(path),
                let change = LocalChange.of(global: nil, local: nil, announced: entry, me: input.me, rule: input.global.conflictRule)
            {
                addLocalChange(change, path: path, global: nil, local: nil)
            }
            return
        }
        if input.sends && selection.isSelected(path) && !isJunk(path),
            let change = LocalChange.of(global: nil, local: file, announced: input.announced[path], me: input.me, rule: input.global.conflictRule)
        {
            addLocalChange(change, path: path, global: nil, local: file)
            if file.kind != .directory && Self.isConflictCopy(path) { classifyLocalOnly(file, reason: "") }
        } else if input.sends && selection.isSelected(path), let mine = input.announced[path], !mine.isDeleted,
            Announcement.diskHas(mine, file)
        {
            // Sent by this device, not announced by any peer yet: no conflict; a send to wait
            // on when peers are connected (``addNotYetHeld(_:local:global:)``).
            addNotYetHeld(path, local: file, global: nil)
            if Self.isConflictCopy(path) { classifyLocalOnly(file, reason: "") }
        } else if file.kind != .directory {
            classifyLocalOnly(file, reason: "not in the global index")
        }
    }

    /// A file this device sent earlier (announced, and on disk as announced) whose version no
    /// connected peer holds: the peers were away when it was sent. Planned as a send that
    /// announces nothing new, for apply to wait on while the peers take it. Returns whether it
    /// was planned.
    @discardableResult
    private mutating func addNotYetHeld(_ path: String, local: LocalFile?, global: FileEntry?) -> Bool {
        guard input.pendingSends, input.sends, let connected = input.connectedPeers, !connected.isEmpty,
            selection.isSelected(path), !isJunk(path), let local, local.kind != .directory,
            let mine = input.announced[path], !mine.isInvalid, !mine.isDeleted, mine.type != .directory,
            Announcement.diskHas(mine, local)
        else { return false }
        // The peers' best version already is this one, or replaces it: nothing pending.
        if let global, global.version.compare(mine.version) != .lesser { return false }
        sends.append(
            Action(
                action: .send, path: path, size: local.kind == .file ? local.size : 0,
                reason: "sent earlier while no peer took it; no connected peer holds it yet",
                type: Self.kindName(local.kind), version: describe(mine.version), cause: .notYetHeld))
        return true
    }

    static func isConflictCopy(_ path: String) -> Bool {
        (WireName.components(path).last.map(String.init) ?? path).contains(".sync-conflict-")
    }

    private func isJunk(_ path: String) -> Bool {
        let name = WireName.components(path).last.map(String.init) ?? path
        return Reconciler.junkNames.contains(name) || selection.isGloballyIgnored(path)
    }

    /// A change made here, as the plan proposes it (``LocalChange``).
    private mutating func addLocalChange(_ change: LocalChange, path: String, global: GlobalEntry?, local: LocalFile?) {
        switch change {
        case .send(let base), .sendWinningConflict(let base):
            let won: Bool
            if case .sendWinningConflict = change { won = true } else { won = false }
            let what: String
            if won {
                what = "changed here and on the peers; this change is newer, so it is sent and the peers keep theirs as a conflict copy"
            } else if global == nil || global!.file.isDeleted {
                what = global == nil ? "new here" : "created here again after the peers deleted it"
            } else {
                what = "changed here"
            }
            sends.append(
                Action(
                    action: .send, path: path, size: local?.kind == .file ? local!.size : 0, reason: what,
                    type: Self.kindName(local?.kind ?? .file), version: describe(base), cause: won ? .conflictWon : .localChange))
        case .sendDelete(let base):
            let announced = input.announced[path]
            let type = announced.map(Self.typeName) ?? .file
            sendDeletes.append(Action(action: .sendDelete, path: path, reason: "deleted here", type: type, version: describe(base), cause: .localChange))
        case .losesConflict:
            guard let global else { return }
            if !input.receives {
                addConflict(Conflict(kind: .concurrent, path: path, reason: "changed here and on the peers, and theirs is newer; this folder is sendonly, so nothing is pulled", choices: Self.concurrentChoices))
                return
            }
            let conflictName = "NAME.sync-conflict-DATE-TIME-\(DeviceID.shortIDString(global.file.modifiedBy))"
            pulls.append(
                Action(
                    action: .pull, path: path, size: global.file.size,
                    reason: "changed here and on the peers, and theirs is newer: the local copy is kept as \(conflictName) and sent, theirs pulled",
                    type: Self.typeName(global.file), version: describe(global.file.version), peers: names(global.holders), cause: .conflictLost))
        }
    }

    private mutating func classify(global g: GlobalEntry, local l: LocalFile?) {
        let path = g.path
        let selected = selection.isSelected(path)
        let file = g.file
        if file.isInvalid && g.holders.isEmpty {
            // No peer holds a usable copy (every holder marks it invalid, e.g. ignored there).
            if selected && l == nil && !file.isDeleted {
                warnings.append("\(path): selected, but no peer holds a valid copy")
            }
            return
        }
        if let l, l.kind == .file, selected, Self.isConflictCopy(path), !file.isDeleted {
            // A conflict copy synced like any file (made here or by a peer): listed for the user.
            addConflict(Conflict(kind: .conflictCopy, path: path, reason: "a conflict copy: the losing side of a change made on two devices at once", choices: Self.deletedGloballyChoices))
        }
        if input.sends && selected && !isJunk(path),
            let change = LocalChange.of(global: file, local: l, announced: input.announced[path], me: input.me, rule: input.global.conflictRule)
        {
            addLocalChange(change, path: path, global: g, local: l)
            return
        }
        if addNotYetHeld(path, local: l, global: file) { return }
        if file.isDeleted {
            classifyDeletedGlobally(g, local: l, selected: selected)
            return
        }
        let type = Self.typeName(file)
        if file.type == .directory {
            guard selected else { return }
            if l == nil {
                mkdirs[path] = Action(action: .mkdir, path: path, reason: "selected directory", type: .directory, version: describe(file.version), cause: .directory, mode: mode(of: file))
            } else if l!.kind == .directory {
                addChmodIfNeeded(l!, file)
            } else if let synced = l!.synced, Reconciler.contentHash(of: l!) == synced.contentHash,
                file.version.compare(synced.version) == .greater
            {
                // The peers replaced the file Kaiten synced here by a directory: as syncthing does,
                // the file goes (before anything is pulled) and the directory takes its place.
                replacedFiles.insert(path)
                deletes.append(Action(action: .delete, path: path, size: l!.size, reason: "replaced by a directory on peers", type: Self.kindName(l!.kind), version: describe(synced.version), cause: .replaced))
                mkdirs[path] = Action(action: .mkdir, path: path, reason: "selected directory", type: .directory, version: describe(file.version), cause: .directory, mode: mode(of: file))
            } else {
                addConflict(Conflict(kind: .shadowed, path: path, reason: "a local \(Self.kindName(l!.kind)) where the global index has a directory", choices: Self.shadowedChoices))
            }
            return
        }
        // A regular file or a symlink.
        let globalHash = Reconciler.contentHash(of: file)
        let peers = names(g.holders)
        guard let l else {
            if selected {
                pulls.append(Action(action: .pull, path: path, size: file.size, reason: "selected, not present locally", type: type, version: describe(file.version), peers: peers, cause: .selected))
            }
            return
        }
        if l.kind == .directory {
            if selected {
                // Settled in orderedActions: replaced when everything below it goes anyway.
                replacedDirectories[path] = Action(action: .pull, path: path, size: file.size, reason: "replaced a directory on peers", type: type, version: describe(file.version), peers: peers, cause: .selected)
            }
            return
        }
        let localHash = Reconciler.contentHash(of: l)
        let sameKind = (l.kind == .symlink) == file.isSymlink
        let equalsGlobal = sameKind && localHash == globalHash
        let unchangedSinceSync = l.synced.map { $0.contentHash == localHash } ?? false
        if selected {
            if equalsGlobal {
                addChmodIfNeeded(l, file)
                return
            }
            if unchangedSinceSync {
                // Only a version that replaces the one written here is pulled: peers that hold an
                // older history (a restored NAS, an index rebuilt from a stale peer) never roll
                // this copy back.
                switch file.version.compare(l.synced!.version) {
                case .equal:
                    return
                case .greater:
                    pulls.append(Action(action: .pull, path: path, size: file.size, reason: "changed on peers; the local copy is unchanged since Kaiten synced it", type: type, version: describe(file.version), peers: peers, cause: .changedOnPeers))
                case .lesser where input.sends && input.announced[path]?.version == l.synced!.version:
                    return  // sent by this device; the peers have not taken it yet
                case .lesser:
                    warnings.append("\(path): the local copy (\(describe(l.synced!.version).joined(separator: ","))) is newer than any version the peers announce (\(describe(file.version).joined(separator: ","))); kept, not rolled back")
                case .concurrentGreater, .concurrentLesser:
                    addConflict(Conflict(kind: .concurrent, path: path, reason: "the version Kaiten synced here and the global version are concurrent (changed on two devices)", choices: Self.concurrentChoices))
                }
            } else if l.synced != nil {
                let why = l.synced!.version == file.version ? "edited locally (Kaiten does not send changes)" : "edited locally while it also changed on peers"
                addConflict(Conflict(kind: .localEdit, path: path, reason: why, choices: Self.localEditChoices))
            } else {
                addConflict(Conflict(kind: .shadowed, path: path, reason: "a local \(Self.kindName(l.kind)) Kaiten never synced, different from the global \(type)", choices: Self.shadowedChoices))
            }
            return
        }
        // Not selected: the local copy goes, if that loses nothing.
        if selection.isGloballyIgnored(path) {
            junk.append(path)
            return
        }
        // The local copy may go only when peers hold this content or a version that replaces it.
        let superseded = unchangedSinceSync && file.version.compare(l.synced!.version) == .greater
        if equalsGlobal || superseded {
            let live = input.connectedPeers.map { connected in g.holders.filter { connected.contains($0) } } ?? g.holders
            let k = input.requirePeers
            if live.count >= k {
                let how = input.connectedPeers == nil ? "last seen holding" : "connected, holding"
                deletes.append(Action(action: .delete, path: path, size: l.size, reason: "deselected; \(live.count) peer\(live.count == 1 ? "" : "s") \(how) the global version", type: Self.kindName(l.kind), version: describe(l.synced?.version ?? file.version), peers: names(live), cause: .deselected))
            } else if g.holders.count >= k {
                addConflict(Conflict(kind: .holdersOffline, path: path, reason: "deselected, but only \(live.count) of the \(g.holders.count) peers holding it are connected now (--require-peers \(k)): kept until they are", choices: Self.lastCopyChoices))
            } else {
                addConflict(Conflict(kind: .lastCopy, path: path, reason: "deselected, but only \(g.holders.count) peer\(g.holders.count == 1 ? "" : "s") hold the global version (--require-peers \(k)): kept", choices: Self.lastCopyChoices))
            }
        } else if unchangedSinceSync {
            // Peers hold an older or a concurrent version: this copy is the only one of its version.
            addConflict(Conflict(kind: .lastCopy, path: path, reason: "deselected, but no peer holds the version Kaiten synced here (peers announce an older or concurrent one): kept", choices: Self.lastCopyChoices))
        } else if l.synced != nil {
            addConflict(Conflict(kind: .localEdit, path: path, reason: "deselected, but edited locally since Kaiten synced it", choices: Self.localEditChoices))
        } else {
            addConflict(Conflict(kind: .shadowed, path: path, reason: "a local \(Self.kindName(l.kind)) Kaiten never synced, where the global index has a different \(type)", choices: Self.shadowedChoices))
        }
    }

    /// The permission bits syncthing would give `file` here, or nil when they are not synced
    /// (the folder's ignorePerms, or the announcing peer's no_permissions). Like syncthing,
    /// only the 0777 bits.
    func mode(of file: FileEntry) -> UInt32? {
        input.ignorePermissions || file.noPermissions ? nil : file.permissions & 0o777
    }

    /// A mode-only difference (content equal) is an action of its own, as syncthing applies it.
    private mutating func addChmodIfNeeded(_ local: LocalFile, _ file: FileEntry) {
        guard local.kind != .symlink, let wanted = mode(of: file), local.permissions & 0o777 != wanted else { return }
        chmods.append(
            Action(
                action: .chmod, path: local.path, reason: String(format: "permissions %04o → %04o", local.permissions & 0o777, wanted),
                type: Self.kindName(local.kind), version: describe(file.version), cause: .permissions, mode: wanted))
    }

    private mutating func classifyDeletedGlobally(_ g: GlobalEntry, local l: LocalFile?, selected: Bool) {
        guard let l else { return }
        if l.kind == .directory {
            if selected && g.file.type == .directory { deletedSelectedDirectories.insert(g.path) }
            return
        }
        let localHash = Reconciler.contentHash(of: l)
        guard let synced = l.synced else {
            classifyLocalOnly(l, reason: "deleted in the global index")
            return
        }
        if synced.contentHash != localHash {
            addConflict(Conflict(kind: .localEdit, path: g.path, reason: "deleted on peers, but edited locally since Kaiten synced it", choices: Self.deletedGloballyChoices))
        } else if selected && g.file.version.compare(synced.version) != .greater {
            // A deletion that does not supersede the version held here (a peer with an older
            // history, or a change concurrent with it) deletes nothing.
            addConflict(Conflict(kind: .concurrent, path: g.path, reason: "deleted on peers, but the deletion does not replace the version Kaiten synced here: kept", choices: Self.deletedGloballyChoices))
        } else if selected {
            deletes.append(Action(action: .delete, path: g.path, size: l.size, reason: "deleted on peers", type: Self.kindName(l.kind), version: describe(synced.version), cause: .deletedOnPeers))
        } else if let localHash, let target = selectedGlobal(withContent: localHash) {
            // Renamed or moved on the peers, and the new name is selected (--follow-renames):
            // the peers hold this content there, so this copy goes as the old name did there.
            let live = input.connectedPeers.map { connected in target.holders.filter { connected.contains($0) } } ?? target.holders
            if live.count >= input.requirePeers {
                deletes.append(Action(action: .delete, path: g.path, size: l.size, reason: "deleted on peers; its content is now at \(target.path)", type: Self.kindName(l.kind), version: describe(synced.version), peers: names(live), cause: .movedOnPeers))
            } else {
                addConflict(Conflict(kind: .holdersOffline, path: g.path, reason: "deleted on peers and its content is now at \(target.path), but only \(live.count) of the peers holding that are connected now (--require-peers \(input.requirePeers)): kept until they are", choices: Self.lastCopyChoices))
            }
        } else {
            // Ignored here and gone everywhere else: this copy may be the last one.
            addConflict(Conflict(kind: .lastCopy, path: g.path, reason: "deselected and deleted on peers: this may be the last copy, kept", choices: Self.lastCopyChoices))
        }
    }

    private mutating func classifyLocalOnly(_ l: LocalFile, reason: String) {
        let name = WireName.components(l.path).last.map(String.init) ?? l.path
        if Reconciler.junkNames.contains(name) || selection.isGloballyIgnored(l.path) {
            junk.append(l.path)
            return
        }
        if name.contains(".sync-conflict-") {
            addConflict(Conflict(kind: .conflictCopy, path: l.path, reason: "a conflict copy (kept local content, not in the global index)", choices: Self.extraneousChoices))
            return
        }
        addConflict(Conflict(kind: .extraneous, path: l.path, reason: "a local \(Self.kindName(l.kind)) \(reason)", choices: Self.extraneousChoices))
    }

    /// mkdir (parents first), pull, delete, rmdir (children first).
    mutating func orderedActions() -> [Action] {
        let local = input.local
        // A directory the peers replaced by a file goes when nothing below it stays: every local
        // file below is deleted by this plan. Its subdirectories go with it, deepest first,
        // before the pull; otherwise it is a conflict, as before.
        var replacingRmdirs: [Action] = []
        if !replacedDirectories.isEmpty {
            let deleted = Set(deletes.map(\.path))
            for (dir, pull) in replacedDirectories.sorted(by: { $0.key < $1.key }) {
                let prefix = dir + "/"
                let below = local.files(withPrefix: prefix)
                if below.allSatisfy({ $0.kind == .directory || deleted.contains($0.path) }) {
                    for sub in below where sub.kind == .directory {
                        replacingRmdirs.append(Action(action: .rmdir, path: sub.path, reason: "inside a directory replaced by a file on peers", type: .directory, cause: .replaced))
                    }
                    replacingRmdirs.append(Action(action: .rmdir, path: dir, reason: "replaced by a \(pull.type) on peers", type: .directory, cause: .replaced))
                    replacedFiles.insert(dir)
                    pulls.append(pull)
                } else {
                    addConflict(Conflict(kind: .shadowed, path: dir, reason: "a local directory where the global index has a \(pull.type), and it holds files that stay", choices: Self.shadowedChoices))
                }
            }
        }
        // Parents a pull needs.
        var blocked = Set(conflicts.map(\.path))
        var keptPulls: [Action] = []
        for pull in pulls {
            var parent = Substring(pull.path)
            var ok = true
            while let slash = parent.lastIndex(of: "/") {
                parent = parent[..<slash]
                let dir = String(parent)
                if let existing = local[dir], !replacedFiles.contains(dir) {
                    if existing.kind != .directory {
                        ok = false
                        if blocked.insert(dir).inserted {
                            // Not yet reported (the global index may not list the directory).
                            addConflict(Conflict(kind: .shadowed, path: dir, reason: "a local \(Self.kindName(existing.kind)) where selected files need a directory", choices: Self.shadowedChoices))
                        }
                    }
                    break
                }
                if mkdirs[dir] == nil {
                    let global = input.global.global(dir)
                    let version = global.map { $0.file.version.descriptions } ?? []
                    let wanted = global.flatMap { $0.file.type == .directory && !$0.file.isDeleted ? mode(of: $0.file) : nil }
                    mkdirs[dir] = Action(action: .mkdir, path: dir, reason: "parent of selected files", type: .directory, version: version, cause: .directory, mode: wanted)
                }
            }
            if ok { keptPulls.append(pull) }
        }

        // Directories the deletions leave empty.
        let deleted = Set(deletes.map(\.path))
        // Only deletions, or directories deleted on the peers, leave directories to remove: a
        // plan without them (a service's round after an edit on a peer) walks no local tree here.
        var rmdirs: [Action] = []
        if !deleted.isEmpty || !deletedSelectedDirectories.isEmpty {
            var occupied: Set<String> = []
            var touched: Set<String> = []
            func markAncestors(_ path: String, in set: inout Set<String>) {
                var p = Substring(path)
                while let slash = p.lastIndex(of: "/") {
                    p = p[..<slash]
                    if !set.insert(String(p)).inserted { break }
                }
            }
            for file in local.files {
                let path = file.path
                if file.kind == .directory {
                    if selection.isSelected(path), let g = input.global.global(path), !g.file.isDeleted, g.file.type == .directory {
                        occupied.insert(path)
                        markAncestors(path, in: &occupied)
                    }
                } else if deleted.contains(path) {
                    markAncestors(path, in: &touched)
                } else {
                    markAncestors(path, in: &occupied)
                }
            }
            for pull in keptPulls { markAncestors(pull.path, in: &occupied) }
            for dir in mkdirs.keys { occupied.insert(dir); markAncestors(dir, in: &occupied) }
            let replacing = Set(replacingRmdirs.map(\.path))
            for file in local.files where file.kind == .directory && !occupied.contains(file.path) && !replacing.contains(file.path) {
                let path = file.path
                if touched.contains(path) {
                    rmdirs.append(Action(action: .rmdir, path: path, reason: "left empty", type: .directory, cause: .emptied))
                } else if deletedSelectedDirectories.contains(path) {
                    rmdirs.append(Action(action: .rmdir, path: path, reason: "deleted on peers", type: .directory, cause: .emptied))
                }
            }
        }

        let byPath = { (actions: [Action]) in Self.sortedByPath(actions, \.path) }
        let depth: (Action) -> Int = { $0.path.utf8.reduce(0) { $0 + ($1 == UInt8(ascii: "/") ? 1 : 0) } }
        let mkdirList = mkdirs.values.sorted { (depth($0), $0.path) < (depth($1), $1.path) }
        let rmdirList = rmdirs.sorted { (depth($0), $1.path) > (depth($1), $0.path) }
        var actions = mkdirList + byPath(keptPulls) + byPath(chmods) + byPath(deletes) + rmdirList
            + replacingRmdirs.sorted { (depth($0), $1.path) > (depth($1), $0.path) }
        if !input.receives {
            // sendonly, as syncthing has it: what the peers changed is not taken. Deselecting
            // still frees space (the peers keep those files).
            let held = actions.filter { !($0.cause == .deselected || ($0.action == .rmdir && $0.cause == .emptied)) }
            if !held.isEmpty {
                warnings.append("sendonly folder: \(held.count) change\(held.count == 1 ? "" : "s") on the peers not taken here (pulls, deletions, directories); this device only sends")
            }
            actions.removeAll { !($0.cause == .deselected || ($0.action == .rmdir && $0.cause == .emptied)) }
        }
        return actions + sends.sorted { (depth($0), $0.path) < (depth($1), $1.path) }
            + sendDeletes.sorted { (depth($0), $1.path) > (depth($1), $0.path) }
    }

    /// `items` in byte order of their paths. The indices are sorted, then the items moved
    /// once: sorting a hundred thousand actions in place copied each (and retained its
    /// strings) at every step of the merge sort.
    static func sortedByPath<T>(_ items: [T], _ path: (T) -> String) -> [T] {
        let paths = items.map(path)
        let order = paths.indices.sorted { paths[$0].utf8Precedes(paths[$1]) }
        return order.map { items[$0] }
    }

    static func typeName(_ file: FileEntry) -> Action.EntryType {
        file.type == .directory ? .directory : file.isSymlink ? .symlink : .file
    }

    static func kindName(_ kind: LocalFile.Kind) -> Action.EntryType {
        switch kind {
        case .file: return .file
        case .directory: return .directory
        case .symlink: return .symlink
        }
    }
}

extension GlobalIndex {
    /// The global versions a coverage reaches: its ranges, or everything.
    func forEachGlobal(covering coverage: Selection.Coverage, _ body: (GlobalEntry) throws -> Void) rethrows {
        if coverage.everything {
            try forEachGlobal(body)
        } else {
            try forEachGlobal(exact: coverage.exact, prefixes: coverage.prefixes, body)
        }
    }
}
