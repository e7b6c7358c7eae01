/** Bad usage: exit code 2, the message and the command's usage. */
export class UsageError extends Error {}
