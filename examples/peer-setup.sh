#!/usr/bin/env bash
# Introduce a Kaiten device to an existing syncthing device and share one folder.
# Run on the Kaiten machine; PEER_ID and PEER_ADDR describe the syncthing device.
set -euo pipefail
PEER_ID=${PEER_ID:?set PEER_ID to the syncthing device ID}
PEER_ADDR=${PEER_ADDR:?set PEER_ADDR, e.g. tcp://nas.local:22000}
FOLDER=${FOLDER:-photos}

kaiten init --name "$(hostname)" 2>/dev/null || true   # never overwrites an existing identity
kaiten peer add "$PEER_ID" --name nas --address "$PEER_ADDR"
kaiten folder add "$FOLDER" --path "$HOME/$FOLDER" --type receiveonly --share "$PEER_ID"
echo "Now, on the syncthing device: add device $(kaiten id) and share folder '$FOLDER' with it."
echo "Then: kaiten peer check && kaiten index sync && kaiten ls $FOLDER"
