-- When an SQS credential stops working (NULL: never). A credential minted by a key that expires
-- may not outlive that key, so it needs a time of its own.
ALTER TABLE sqs_credentials ADD COLUMN expires_at timestamptz;
