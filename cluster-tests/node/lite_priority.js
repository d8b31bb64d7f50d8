// The official RocketMQ Node.js client (1.0.8) with the newest message kinds:
// 1. priority messages: a producer sends priorities 0-7 (lowest first) to an 8-queue priority
//    topic; a SimpleConsumer receiving in batches of 4 gets every one once, with its priority,
//    from the highest queue down;
// 2. lite topics: a producer sends to lite topics node-a and node-b of a lite parent; a
//    LitePushConsumer subscribed to node-a alone gets node-a's messages, in order, and nothing of
//    node-b.
// Usage: node lite_priority.js ENDPOINT PRIORITY_TOPIC PRIORITY_GROUP LITE_TOPIC LITE_GROUP.
// Exit 0 when every check held, 1 otherwise.
'use strict';
const { ConsumeResult, LitePushConsumerBuilder, Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

function fail(why) {
  console.error(`FAIL: ${why}`);
  process.exit(1);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function priorities(endpoints, producer, topic, group) {
  const sent = new Map();
  for (let round = 0; round < 2; round++) {
    for (let p = 0; p < 8; p++) {
      const body = `p${p}-r${round}-${Date.now()}`;
      await producer.send({ topic, body: Buffer.from(body), priority: p });
      sent.set(body, p);
    }
  }
  const consumer = new SimpleConsumer({
    consumerGroup: group,
    endpoints,
    subscriptions: new Map().set(topic, '*'),
    awaitDuration: 3000,
  });
  await consumer.startup();
  const order = [];
  const deadline = Date.now() + 40000;
  while (order.length < sent.size) {
    if (Date.now() > deadline) fail(`received ${order.length} of ${sent.size} priority messages in 40 s`);
    for (const m of await consumer.receive(4, 30000)) {
      const body = m.body.toString();
      if (!sent.has(body)) fail(`unexpected message ${body}`);
      if (m.priority !== sent.get(body)) fail(`${body} came with priority ${m.priority}`);
      order.push(sent.get(body));
      await consumer.ack(m);
    }
  }
  for (let i = 1; i < order.length; i++) {
    if (order[i] > order[i - 1]) fail(`priority ${order[i]} arrived after ${order[i - 1]}: ${order}`);
  }
  console.error(`1: priorities arrived highest first: ${order}`);
}

async function lite(endpoints, producer, topic, group) {
  const got = [];
  const consumer = await new LitePushConsumerBuilder()
    .setClientConfiguration({ endpoints })
    .setConsumerGroup(group)
    .bindTopic(topic)
    .setMessageListener({
      async consume(m) {
        got.push([m.liteTopic, m.body.toString()]);
        return ConsumeResult.SUCCESS;
      },
    })
    .build();
  // The quota arrives with the server's settings, after startup.
  const subscribeBy = Date.now() + 15000;
  for (;;) {
    try {
      await consumer.subscribeLite('node-a');
      break;
    } catch (e) {
      if (Date.now() > subscribeBy) fail(`subscribeLite kept failing: ${e}`);
      await sleep(300);
    }
  }
  const want = [];
  for (let i = 0; i < 5; i++) {
    const a = `node-a-${i}-${Date.now()}`;
    await producer.send({ topic, body: Buffer.from(a), liteTopic: 'node-a' });
    want.push(a);
    await producer.send({ topic, body: Buffer.from(`node-b-${i}`), liteTopic: 'node-b' });
  }
  const deadline = Date.now() + 40000;
  while (new Set(got.map(([, b]) => b)).size < want.length) {
    if (Date.now() > deadline) fail(`the LitePushConsumer got ${got.length} of ${want.length} in 40 s: ${got}`);
    await sleep(200);
  }
  await sleep(2000);
  const firsts = [];
  for (const [liteTopic, body] of got) {
    if (liteTopic !== 'node-a') fail(`delivered lite topic ${liteTopic}, subscribed to node-a only`);
    if (!firsts.includes(body)) firsts.push(body);
  }
  if (firsts.join() !== want.join()) fail(`node-a arrived as ${firsts}, sent as ${want}`);
  console.error('2: the LitePushConsumer got node-a in order and nothing of node-b');
}

async function main() {
  const [endpoints, priorityTopic, priorityGroup, liteTopic, liteGroup] = process.argv.slice(2);
  if (!liteGroup) fail('usage: node lite_priority.js ENDPOINT PRIORITY_TOPIC PRIORITY_GROUP LITE_TOPIC LITE_GROUP');
  const producer = new Producer({ endpoints });
  await producer.startup();
  await priorities(endpoints, producer, priorityTopic, priorityGroup);
  await lite(endpoints, producer, liteTopic, liteGroup);
  console.error('PASS');
  // The client's log stream complains when closed at exit; the verdict is in.
  process.exit(0);
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));
