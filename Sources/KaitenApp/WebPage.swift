import KaitenConfig
import KaitenService

extension App {
    /// `kaiten ui`: the running service's web page, as a link with a one-time login token (it
    /// becomes the browser's session cookie; the link works once, for two minutes).
    public func webPageLink() throws -> String {
        let opened = try openForReading()
        guard case .service(let service) = try route("ui", .readsFromService, in: opened), service.role == "run" else {
            throw VerbEnded(.failure, "no `kaiten run` answers for \(opened.home.path): the page is served by it (start it, then run `kaiten ui` again)")
        }
        let token: String
        do {
            token = try service.uiLoginToken()
        } catch {
            throw VerbEnded(ExitStatus(code: error.code), error.message)
        }
        let record = ServiceRecord.running(opened.home)
        guard let base = record?.pageURL ?? record?.restURL else {
            throw VerbEnded(.failure, "kaiten run (pid \(service.pid)) has no REST API address in \(opened.home.stateDirectory)/service.json yet")
        }
        return base + "/ui/login?token=" + token
    }
}
