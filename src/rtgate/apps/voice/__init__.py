"""Scenario 3: a streaming voice agent (VAD → ASR → turns → agent → TTS, with barge-in)."""
