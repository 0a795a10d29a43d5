// The admin API contract on the embedded SQLite queue.
import { describeAdminApi } from './api-contract.js';

describeAdminApi('local', { queue: () => ({ driver: 'local' }) });
