import KaitenApply
import KaitenMedia
import KaitenProtocol
import KaitenReconcile
import KaitenService
import KaitenTransfer

// The values the verbs return and the front-ends render, under the names they have here, so
// that a front-end speaks to this layer alone.

/// What it takes to make folders match their selections (`plan --json` prints it as it is).
public typealias Plan = KaitenReconcile.Plan
/// A conflict's kinds and the choices that settle it.
public typealias Conflict = KaitenReconcile.Conflict
/// What an apply did.
public typealias ApplyReport = KaitenApply.ApplyReport
/// What an apply says as it runs.
public typealias ApplyEvent = KaitenApply.ApplyEvent
/// `--max-delete`: a count, or a share of a folder's local files.
public typealias DeleteLimit = KaitenApply.DeleteLimit
/// Ctrl-C during an apply: raised, it stops between blocks.
public typealias StopSignal = KaitenTransfer.StopSignal
/// One thumbnail's outcome, and the options a run takes.
public typealias Thumbnails = KaitenMedia.Thumbnails
public typealias DeviceID = KaitenProtocol.DeviceID
public typealias ThumbnailOutcome = KaitenMedia.Thumbnails.Outcome
/// Sizes as people read them, and other facts shown as text.
public typealias TextFacts = KaitenProtocol.TextFacts
/// A file or a selection's text split into lines as selection files are.
public typealias TextLines = KaitenProtocol.TextLines
/// Whether a host name or address is this machine's loopback (servers refuse others unless told).
public typealias LoopbackHost = KaitenProtocol.LoopbackHost
/// A service's event, as `run --json` and the control socket say it; its schema version.
public typealias ServiceEvent = KaitenService.ServiceEvent
/// The thumbnail cache in Sushitrain's layout, and the size phones share.
public typealias ThumbnailCache = KaitenMedia.ThumbnailCache
/// `kaiten run`'s service (a run's options are `Service.Options`).
public typealias Service = KaitenService.Service
