/**
 * MQTT helpers of the cross-protocol end-to-end tests (MQTT.js).
 */
import mqtt, { type IPublishPacket, type MqttClient } from 'mqtt';
import { eventually } from './harness.js';

/** An MQTT v5 client that records what arrives; `until(marker)` resolves with what came before the marker. */
export async function mqttCollector(
  url: string,
  filters: string[],
  opts: mqtt.IClientOptions = {},
): Promise<{ c: MqttClient; got: IPublishPacket[]; until(payload: string): Promise<IPublishPacket[]> }> {
  const c = await mqtt.connectAsync(url, { protocolVersion: 5, reconnectPeriod: 0, ...opts });
  const got: IPublishPacket[] = [];
  c.on('message', (_t, _p, packet) => got.push(packet));
  for (const f of filters) await c.subscribeAsync(f, { qos: 1 });
  return {
    c,
    got,
    async until(payload: string) {
      await eventually(() => got.some((p) => p.payload.toString() === payload), 10_000, `MQTT marker ${payload}`);
      const i = got.findIndex((p) => p.payload.toString() === payload);
      return got.splice(0, i + 1).slice(0, i);
    },
  };
}
