// The BullMQ queue driver, imported by drivers.ts only when queue.driver is bullmq.
export { createBullmqDriver } from './driver.js';
