import KaitenProtocol

/// The config.xml of a new home: the layout `syncthing generate --no-default-folder` writes
/// (config version 36), with everything that reaches beyond the given addresses switched off.
enum ConfigTemplate {
    static func render(
        myID: DeviceID, name: String, listenAddress: String, apiKey: String, guiAddress: String = "127.0.0.1:8384", discovery: Bool = false,
        relays: Bool = false
    ) -> String {
        let id = myID.description
        return """
            <configuration version="36">
                <device id="\(id)" name="\(escape(name))" compression="metadata" introducer="false" skipIntroductionRemovals="false" introducedBy="">
                    <address>dynamic</address>
                    <paused>false</paused>
                    <autoAcceptFolders>false</autoAcceptFolders>
                    <maxSendKbps>0</maxSendKbps>
                    <maxRecvKbps>0</maxRecvKbps>
                    <maxRequestKiB>0</maxRequestKiB>
                    <untrusted>false</untrusted>
                    <remoteGUIPort>0</remoteGUIPort>
                </device>
                <gui enabled="true" tls="false" debugging="false">
                    <address>\(escape(guiAddress))</address>
                    <apikey>\(apiKey)</apikey>
                    <theme>default</theme>
                </gui>
                <ldap></ldap>
                <options>
                    <listenAddress>\(escape(listenAddress))</listenAddress>
                    <globalAnnounceServer>default</globalAnnounceServer>
                    <globalAnnounceEnabled>\(discovery)</globalAnnounceEnabled>
                    <localAnnounceEnabled>\(discovery)</localAnnounceEnabled>
                    <localAnnouncePort>21027</localAnnouncePort>
                    <localAnnounceMCAddr>[ff12::8384]:21027</localAnnounceMCAddr>
                    <maxSendKbps>0</maxSendKbps>
                    <maxRecvKbps>0</maxRecvKbps>
                    <reconnectionIntervalS>60</reconnectionIntervalS>
                    <relaysEnabled>\(relays)</relaysEnabled>
                    <relayReconnectIntervalM>10</relayReconnectIntervalM>
                    <startBrowser>false</startBrowser>
                    <natEnabled>false</natEnabled>
                    <natLeaseMinutes>60</natLeaseMinutes>
                    <natRenewalMinutes>30</natRenewalMinutes>
                    <natTimeoutSeconds>10</natTimeoutSeconds>
                    <urAccepted>-1</urAccepted>
                    <urSeen>3</urSeen>
                    <urUniqueID></urUniqueID>
                    <urURL></urURL>
                    <urPostInsecurely>false</urPostInsecurely>
                    <urInitialDelayS>1800</urInitialDelayS>
                    <restartOnWakeup>false</restartOnWakeup>
                    <autoUpgradeIntervalH>0</autoUpgradeIntervalH>
                    <upgradeToPreReleases>false</upgradeToPreReleases>
                    <keepTemporariesH>24</keepTemporariesH>
                    <cacheIgnoredFiles>false</cacheIgnoredFiles>
                    <progressUpdateIntervalS>5</progressUpdateIntervalS>
                    <limitBandwidthInLan>false</limitBandwidthInLan>
                    <minHomeDiskFree unit="%">1</minHomeDiskFree>
                    <releasesURL></releasesURL>
                    <overwriteRemoteDeviceNamesOnConnect>false</overwriteRemoteDeviceNamesOnConnect>
                    <tempIndexMinBlocks>10</tempIndexMinBlocks>
                    <unackedNotificationID>authenticationUserAndPassword</unackedNotificationID>
                    <trafficClass>0</trafficClass>
                    <setLowPriority>false</setLowPriority>
                    <maxFolderConcurrency>0</maxFolderConcurrency>
                    <crashReportingURL></crashReportingURL>
                    <crashReportingEnabled>false</crashReportingEnabled>
                    <stunKeepaliveStartS>0</stunKeepaliveStartS>
                    <stunKeepaliveMinS>0</stunKeepaliveMinS>
                    <stunServer>default</stunServer>
                    <databaseTuning>auto</databaseTuning>
                    <maxConcurrentIncomingRequestKiB>0</maxConcurrentIncomingRequestKiB>
                    <announceLANAddresses>false</announceLANAddresses>
                    <sendFullIndexOnUpgrade>false</sendFullIndexOnUpgrade>
                    <connectionLimitEnough>0</connectionLimitEnough>
                    <connectionLimitMax>0</connectionLimitMax>
                    <insecureAllowOldTLSVersions>false</insecureAllowOldTLSVersions>
                </options>
            </configuration>

            """
    }

    static func escape(_ text: String) -> String {
        var out = ""
        for ch in text {
            switch ch {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&#34;"
            case "'": out += "&#39;"
            default: out.append(ch)
            }
        }
        return out
    }
}
